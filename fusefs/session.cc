// Mount lifecycle: create the libfuse session, mount, daemonize, serve, unmount.
//
// Order matters: the mount is made before fuse_daemonize() forks, so the parent returns only
// once the kernel mount exists (the kernel queues requests until the loop answers INIT), and
// no thread is started before the fork.
#include "fusefs/session.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cachestore/log.h"
#include "cachestore/root_dir.h"
#include "fusefs/fuse_ops.h"
#include "fusefs/kernel_readahead.h"
#include "fusefs/kernel_teardown.h"
#include "fusefs/metrics.h"
#include "fusefs/metrics_listener.h"
#include "fusefs/passthrough.h"
#include "fusefs/uring_transport.h"
#include "fusefs/worker_pool.h"

namespace epochfs::fusefs {
namespace {

using cachestore::LogLevel;

// How often --metrics-file is rewritten: a few times per scrape interval of a collector.
constexpr auto kMetricsPeriod = std::chrono::seconds(5);

// libfuse's option parser splits on ',' unless escaped with '\'.
std::string escape_option_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

// Owns the argv strings handed to libfuse.
class FuseArgs {
 public:
  void add(std::string arg) { strings_.push_back(std::move(arg)); }

  fuse_args build() {
    argv_.clear();
    for (auto& s : strings_) {
      argv_.push_back(s.data());
    }
    argv_.push_back(nullptr);
    return FUSE_ARGS_INIT(static_cast<int>(strings_.size()), argv_.data());
  }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> argv_;
};

void fill_args(const MountOptions& o, FuseArgs& args) {
  args.add("epochfs");
  if (o.debug) {
    args.add("-d");
  }
  // No kernel `ro` flag: orders are published by writing into .epochfs/, so writes must reach
  // the daemon, which answers EROFS for everything else (fusefs/fuse_ops.cc).
  std::string opts = "fsname=" + escape_option_value(o.source) + ",subtype=epochfs";
  if (o.allow_other) {
    // Other users are checked by the kernel against the source's modes.
    opts += ",allow_other,default_permissions";
  }
  args.add("-o");
  args.add(opts);
  for (const auto& extra : o.fuse_options) {
    args.add("-o");
    args.add(extra);
  }
}

int serve(fuse_session* se, const MountOptions& o, Filesystem& fs) {
  // Requests still being served when the connection ends are finished first: none may wait
  // for a source that is down any longer.
  const int rc = serve_requests(se, o.threads, [&fs] { fs.source_guard().stop_waiting(); });
  // ECONNABORTED means the kernel ended the connection (seen now and then right after a plain
  // unmount on 6.x kernels, and after an abort through fusectl): the mount is gone either way,
  // so the daemon cleans up and exits as after an unmount.
  if (rc == -ECONNABORTED) {
    cachestore::log(LogLevel::kInfo, "the kernel ended the connection");
    return 0;
  }
  if (rc < 0) {
    cachestore::log(LogLevel::kError, "session loop failed: %s",
                    cachestore::error_text(-rc).c_str());
    return 1;
  }
  return 0;
}

// Each open file through the mount holds one source fd until release; let that use the
// whole hard limit rather than the usual soft 1024.
void raise_open_files_limit() {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The readers' share of the open-files limit is what all users' open handles may hold; one
// user, of a mount others share (--allow-other), gets at most half of it, so that no one user
// can take every descriptor. A mount only its owner uses gives them all of it.
void fit_opens_per_user(MountOptions& o, uint64_t readers, std::string* note) {
  o.fs.opens = readers;
  if (!o.allow_other) {
    o.fs.opens_per_user = readers;
  } else if (o.fs.opens_per_user > readers / 2) {
    o.fs.opens_per_user = readers / 2;
    *note += std::string(note->empty() ? "" : "; ") + "--max-opens-per-user lowered to " +
             std::to_string(readers / 2) + ", half the readers' share of the open-files limit";
  }
}

// Fits the daemon's threads to its open-files limit, so that readers never get EMFILE: each
// FUSE worker may hold two pipes (four fds: libfuse's for splicing requests, ours for copies),
// each running copy a source and a cache file (three with the directory), each implicit open
// one file, and each queued copy of a miss the reader's source fd (duplicated). The readers'
// own open files get a quarter of the limit (at least 128: a reader holds its file and, until
// the kernel's RELEASE arrives, the one before), the daemon's own descriptors (stdio,
// /dev/fuse, the log, the source root, the cache directory and its lock, the watcher, /proc
// reads) a fixed 16; workers, copies and implicit opens share the rest, and the queue of
// copies gets what is left. Under the usual limit (thousands) nothing changes.
MountOptions fit_to_open_files_limit(MountOptions o, std::string* note) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return o;
  }
  const uint64_t limit = lim.rlim_cur;
  constexpr uint64_t kOwn = 16;
  const uint64_t readers = std::max<uint64_t>(limit / 4, 128);
  const uint64_t rest = limit > readers + kOwn + 4 ? limit - readers - kOwn - 4 : 0;
  // 4 descriptors per worker, 3 per copy, 1 per implicit open, from the same share.
  const auto share = static_cast<unsigned>(std::min<uint64_t>(rest / 8, UINT32_MAX));
  const unsigned threads = std::min(o.threads, std::max(4u, share));
  const unsigned copies = std::min(o.engine.stage_threads, std::max(2u, share));
  const size_t implicit = std::min<size_t>(o.fs.implicit_opens_kept, std::max(16u, share));
  const uint64_t taken = readers + kOwn + 4 * uint64_t{threads} + 3 * uint64_t{copies} + implicit;
  const uint64_t queue = std::max<uint64_t>(4, limit > taken ? limit - taken : 0);
  if (threads < o.threads || copies < o.engine.stage_threads) {
    *note = "open-files limit " + std::to_string(limit) + ": at most " + std::to_string(threads) +
            " FUSE threads and " + std::to_string(copies) + " copies at once";
  }
  o.threads = threads;
  o.engine.stage_threads = copies;
  o.engine.max_pending_copies =
      static_cast<unsigned>(std::min<uint64_t>(o.engine.max_pending_copies, queue));
  o.fs.implicit_opens_kept = implicit;
  fit_opens_per_user(o, readers, note);
  return o;
}

// glibc raises its mmap threshold to the size of every large block freed (up to 32 MiB), so
// that the large blocks that grow and are freed while an order is published are then taken
// from the heap and kept there: 14 bytes per file of ImageNet's 1.28 M after two publishes
// (119 -> 105 bytes per file with two entries each, docs/benchmarks.md). A fixed threshold
// keeps blocks from 256 KiB up mapped, and given back when freed.
void keep_large_blocks_mapped() {
  constexpr int kMmapThreshold = 256 << 10;
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);  // NOLINT(concurrency-mt-unsafe): no thread yet
}

// What must exist before the fork, each opened so that its failure is told in the user's
// terminal: the source, the cache directory, the metrics port.
struct Resources {
  cachestore::RootDir source;
  struct stat root_st;
  std::unique_ptr<cachestore::CacheStore> cache;
  std::unique_ptr<MetricsListener> listener;
};

std::optional<Resources> open_resources(const MountOptions& o) {
  auto source = cachestore::RootDir::open(o.source);
  if (!source.is_ok()) {
    fprintf(stderr, "epochfs: cannot open source %s\n", source.status().to_string().c_str());
    return std::nullopt;
  }
  auto root_st = source.value().stat_at("");
  if (!root_st.is_ok()) {
    fprintf(stderr, "epochfs: cannot stat source %s\n", root_st.status().to_string().c_str());
    return std::nullopt;
  }
  std::unique_ptr<cachestore::CacheStore> cache;
  if (o.cache.capacity_bytes > 0) {
    auto opened = cachestore::CacheStore::open(o.cache, std::make_unique<cachestore::LruPolicy>());
    if (!opened.is_ok()) {
      fprintf(stderr, "epochfs: cannot use the cache directory: %s\n",
              opened.status().to_string().c_str());
      return std::nullopt;
    }
    cache = std::move(opened).value();
  }
  std::unique_ptr<MetricsListener> listener;
  if (!o.metrics_listen.empty()) {
    auto bound = MetricsListener::bind(o.metrics_listen);
    if (!bound.is_ok()) {
      fprintf(stderr, "epochfs: cannot listen: %s\n", bound.status().to_string().c_str());
      return std::nullopt;
    }
    listener = std::move(bound).value();
    // With port 0 the user cannot know the port otherwise (the log may be syslog's).
    fprintf(stderr, "epochfs: metrics at http://%s/metrics\n", listener->address().c_str());
  }
  return Resources{std::move(source).value(), root_st.value(), std::move(cache),
                   std::move(listener)};
}

// The libfuse session from its creation to its unmount: the destructor undoes, in reverse,
// each step that was taken, whichever step failed.
class Session {
 public:
  // Prints why on failure.
  static std::unique_ptr<Session> create(const MountOptions& o, Filesystem& fs) {
    FuseArgs arg_strings;
    fill_args(o, arg_strings);
    fuse_args args = arg_strings.build();
    auto session = std::unique_ptr<Session>(new Session);
    // Takes the standard connection options (splice_write, ...) out of args for op_init.
    session->conn_opts_ = fuse_parse_conn_info_opts(&args);
    if (session->conn_opts_ == nullptr) {
      fuse_opt_free_args(&args);
      fprintf(stderr, "epochfs: bad -o option\n");
      return nullptr;
    }
    set_conn_info_opts(session->conn_opts_);
    session->se_ = fuse_session_new(&args, &fuse_operations(), sizeof(fuse_lowlevel_ops), &fs);
    fuse_opt_free_args(&args);
    if (session->se_ == nullptr) {
      fprintf(stderr, "epochfs: cannot create the FUSE session (see the message above)\n");
      return nullptr;
    }
    // Verify drops damaged copies from the kernel's page cache too (Filesystem::run_verify).
    fs.set_invalidate_pages([se = session->se_](InodeId id) {
      const int rc = fuse_lowlevel_notify_inval_inode(se, id, 0, 0);
      if (rc != 0 && rc != -ENOENT) {  // ENOENT: the kernel has no such node any more
        cachestore::log(LogLevel::kWarning, "cannot drop the kernel's pages of a damaged copy: %s",
                        cachestore::error_text(-rc).c_str());
      }
    });
    if (fuse_set_signal_handlers(session->se_) != 0) {
      fprintf(stderr, "epochfs: cannot install signal handlers\n");
      return nullptr;
    }
    session->handlers_ = true;
    return session;
  }

  bool mount(const std::string& mountpoint) {
    mounted_ = fuse_session_mount(se_, mountpoint.c_str()) == 0;
    if (!mounted_) {
      fprintf(stderr, "epochfs: cannot mount on %s (see the message above)\n", mountpoint.c_str());
    }
    return mounted_;
  }

  fuse_session* get() const { return se_; }

  ~Session() {
    if (mounted_) {
      fuse_session_unmount(se_);
    }
    if (handlers_) {
      fuse_remove_signal_handlers(se_);
    }
    if (se_ != nullptr) {
      fuse_session_destroy(se_);
    }
    free(conn_opts_);  // op_init, which reads it, has run or never will
  }

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  Session() = default;

  fuse_session* se_ = nullptr;
  fuse_conn_info_opts* conn_opts_ = nullptr;
  bool handlers_ = false;
  bool mounted_ = false;
};

// Where the log goes once the mount is in place (before the fork: syslog in the background).
void direct_log(const MountOptions& o) {
  if (!o.log_file.empty()) {
    cachestore::set_log_sink(cachestore::LogSink::kFile, "epochfs");
  } else if (!o.foreground) {
    cachestore::set_log_sink(cachestore::LogSink::kSyslog, "epochfs");
  }
}

// Serves until the mount ends, with the metrics written and listened for meanwhile: they
// stop before the filesystem they read goes.
int serve_with_metrics(const MountOptions& o, fuse_session* se, Filesystem& fs,
                       std::unique_ptr<MetricsListener> listener) {
  std::unique_ptr<MetricsFileWriter> metrics;
  if (!o.metrics_file.empty()) {
    metrics = std::make_unique<MetricsFileWriter>(
        o.metrics_file, [&fs] { return fs.metrics(); }, kMetricsPeriod);
  }
  if (listener) {
    listener->start([&fs] { return fs.metrics(); });
  }
  return serve(se, o, fs);
}

}  // namespace

int run_mount(const MountOptions& options) {
  keep_large_blocks_mapped();
  raise_open_files_limit();
  std::string limit_note;  // logged once the log goes where it should
  MountOptions o = fit_to_open_files_limit(options, &limit_note);
  // A worker makes one call into the source at a time: one calling thread each, and one for
  // the prober, so that calls never queue while the source is well.
  o.engine.source.threads = o.threads + 1;
  auto resources = open_resources(o);
  if (!resources) {
    return 1;
  }
  FilesystemOptions fs_options = o.fs;
  fs_options.implicit_opens = o.data_path == DataPath::kNoOpen;
  fs_options.labels = MountLabels{o.mountpoint, o.source};
  Filesystem fs(std::move(resources->source), resources->root_st, fs_options,
                std::move(resources->cache), o.engine);
  auto session = Session::create(o, fs);
  if (!session || !session->mount(o.mountpoint)) {
    return 1;
  }
  const KernelTeardown teardown(o.mountpoint);
  const KernelReadahead readahead(teardown.devno(), o.read_ahead_kb);
  if (o.read_ahead_kb > 0) {
    fs.set_after_init([&readahead] { readahead.set(); });
  }
  if (o.fuse_uring) {
    uring::want(o.threads);
  }
  if (!passthrough::install(session->get(), o.data_path)) {
    cachestore::log(LogLevel::kWarning, "data path: classic (%s)", passthrough::why_not());
  }
  direct_log(o);
  // In the background the parent exits 0 here, the mount in place; the child goes on.
  if (fuse_daemonize(o.foreground ? 1 : 0) != 0) {
    return 1;
  }
  fs.start();  // threads only now: none may exist across fuse_daemonize's fork
  cachestore::start_log_flusher();
  cachestore::log(LogLevel::kInfo, "serving %s at %s", o.source.c_str(), o.mountpoint.c_str());
  if (!limit_note.empty()) {
    cachestore::log(LogLevel::kWarning, "%s", limit_note.c_str());
  }
  if (fs_options.implicit_opens) {
    cachestore::log(LogLevel::kInfo,
                    "data path: no-open (the kernel opens files itself and keeps their pages)");
  }
  const int rc = serve_with_metrics(o, session->get(), fs, std::move(resources->listener));
  fs.unmounted();
  if (uring::active()) {
    cachestore::log(LogLevel::kInfo, "fuse transport: %llu requests by io_uring, %llu by /dev/fuse",
                    static_cast<unsigned long long>(uring::ring_requests()),
                    static_cast<unsigned long long>(uring::device_requests()));
  }
  cachestore::log(LogLevel::kInfo, "unmounting %s", o.mountpoint.c_str());
  const double waited = teardown.wait();
  if (waited >= 0) {
    cachestore::log(LogLevel::kInfo, "the kernel let go of the mount after %.3f s", waited);
  }
  return rc;  // the session unmounts, and only then the filesystem goes
}

}  // namespace epochfs::fusefs
