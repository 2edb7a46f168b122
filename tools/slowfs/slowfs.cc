// epochfs-slowfs: a read-only FUSE passthrough that behaves like slow shared storage, for tests
// and benchmarks. Each open and each read request takes --latency-ms of the server's time (an
// open --open-latency-ms when given), each lookup and getattr --meta-latency-ms (default 0:
// answered at once); read data then passes one shared link of --bandwidth-mbs; at most
// --max-inflight requests are being served at once (an NFS server's threads), the others
// queue in arrival order. --preset picks all of these for a named kind of storage
// (tools/slowfs/presets.h).
//
// It must cost little CPU (the machines have 2 cores and the trainer, epochfs and the
// storage share them), so nothing sleeps per request: one thread takes requests from the
// kernel and does the work at once; the replies wait in a delay queue, and one reply thread
// sends each when it is due, splicing read data from the file. A read's pages are
// asked for (POSIX_FADV_WILLNEED) when it is taken, so the local disk works during the wait.
//
// It counts opens per file: getxattr("user.slowfs.opens") on a file gives how many times it
// was opened (on the root: over all files), which lets tests prove that a file was read from
// the source once. Attributes carry the source's inode numbers: a cache above (epochfs)
// treats a changed inode number as a changed file.
//
// A test fixture, not part of the product: it uses libfuse directly, which is why it is the
// one file outside fusefs/fuse_ops.h allowed to include libfuse (tools/dev/check.sh).
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <fuse3/fuse_lowlevel.h>

#include "tools/slowfs/presets.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kOpensXattr[] = "user.slowfs.opens";
// Metadata does not change under a benchmark; the kernel may keep it this long.
constexpr double kAttrTimeout = 1.0;

// Nodes are never forgotten: a fixture serves at most a few hundred thousand paths.
class Nodes {
 public:
  Nodes() { paths_.push_back("."); }  // FUSE_ROOT_ID is 1: index 0 unused

  fuse_ino_t lookup(fuse_ino_t parent, const char* name) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string path = parent == FUSE_ROOT_ID ? name : paths_[parent - 1] + "/" + name;
    auto [it, added] = ids_.try_emplace(path, paths_.size() + 1);
    if (added) {
      paths_.push_back(std::move(path));
    }
    return it->second;
  }

  std::string path(fuse_ino_t ino) {
    std::lock_guard<std::mutex> lock(mu_);
    return ino >= 1 && ino <= paths_.size() ? paths_[ino - 1] : std::string();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> paths_;  // by ino - 1
  std::unordered_map<std::string, fuse_ino_t> ids_;
};

// A request waiting for its reply, or the end of a request's time on the server.
struct Pending {
  enum class Kind { kEntry, kAttr, kOpen, kRead, kSlotFree };
  Kind kind = Kind::kSlotFree;
  fuse_req_t req = nullptr;
  int fd = -1;      // open, read: the open file
  size_t size = 0;  // read: bytes asked
  off_t offset = 0;
  size_t bytes = 0;          // read: bytes it will return (for the link)
  fuse_entry_param entry{};  // lookup: the entry; getattr: entry.attr
  bool frees_slot = true;    // its reply ends its time on the server
  Clock::time_point due;
};

struct LaterFirst {
  bool operator()(const Pending& a, const Pending& b) const { return a.due > b.due; }
};

struct ServerModel {
  Clock::duration data_latency;  // read
  Clock::duration open_latency;  // open
  Clock::duration meta_latency;  // lookup, getattr
  double bytes_per_s = 0;        // the link (0: no limit)
  unsigned max_inflight = 1;     // server slots
};

// The server: requests admitted up to max_inflight, each answered when due. A request holds
// its slot for its latency (the server's work); a read's bytes then pass the link, in the
// order the reads were admitted, without holding the slot (a server hands the reply to the
// network and takes the next request).
class DelayQueue {
 public:
  explicit DelayQueue(const ServerModel& model) : model_(model) {}

  // One reply thread: a read's pages were asked for when it was admitted, so its splice
  // seldom waits for the disk (measured: a second thread cost more CPU than it saved).
  void start() {
    thread_ = std::thread([this] { reply_loop(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  bool delays_metadata() const { return model_.meta_latency > Clock::duration::zero(); }

  void submit(Pending p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (inflight_ < model_.max_inflight) {
      admit(std::move(p));
    } else {
      waiting_.push_back(std::move(p));
    }
  }

 private:
  // With mu_ held: the request takes a server slot from now until its service ends.
  void admit(Pending p) {
    ++inflight_;
    const bool meta = p.kind == Pending::Kind::kEntry || p.kind == Pending::Kind::kAttr;
    const bool open = p.kind == Pending::Kind::kOpen;
    p.due = Clock::now() + (meta   ? model_.meta_latency
                            : open ? model_.open_latency
                                   : model_.data_latency);
    if (p.kind == Pending::Kind::kRead) {
      posix_fadvise(p.fd, p.offset, static_cast<off_t>(p.size), POSIX_FADV_WILLNEED);
      if (model_.bytes_per_s > 0 && p.bytes > 0) {
        Pending slot_free;
        slot_free.due = p.due;
        push(std::move(slot_free));
        const auto transfer = std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(static_cast<double>(p.bytes) / model_.bytes_per_s));
        p.due = std::max(p.due, link_free_at_) + transfer;
        link_free_at_ = p.due;
        p.frees_slot = false;
      }
    }
    push(std::move(p));
  }

  void push(Pending p) {
    const bool earliest = due_.empty() || p.due < due_.top().due;
    due_.push(std::move(p));
    if (earliest) {
      cv_.notify_one();
    }
  }

  void reply_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      // A copy: waiting takes the time by reference, and a push while waiting may move the
      // queue's storage.
      const Clock::time_point next = due_.top().due;
      if (Clock::now() < next) {
        cv_.wait_until(lock, next);
        continue;
      }
      const Pending p = due_.top();
      due_.pop();
      lock.unlock();
      reply(p);
      lock.lock();
      if (p.frees_slot) {
        --inflight_;
        if (!waiting_.empty()) {
          admit(std::move(waiting_.front()));
          waiting_.pop_front();
        }
      }
    }
  }

  static void reply(const Pending& p) {
    switch (p.kind) {
      case Pending::Kind::kEntry:
        fuse_reply_entry(p.req, &p.entry);
        return;
      case Pending::Kind::kAttr:
        fuse_reply_attr(p.req, &p.entry.attr, p.entry.attr_timeout);
        return;
      case Pending::Kind::kOpen: {
        fuse_file_info fi{};
        fi.fh = static_cast<uint64_t>(p.fd);
        fuse_reply_open(p.req, &fi);
        return;
      }
      case Pending::Kind::kRead: {
        fuse_bufvec buf = FUSE_BUFVEC_INIT(p.size);
        buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
        buf.buf[0].fd = p.fd;
        buf.buf[0].pos = p.offset;
        fuse_reply_data(p.req, &buf, FUSE_BUF_SPLICE_MOVE);
        return;
      }
      case Pending::Kind::kSlotFree:
        return;
    }
  }

  const ServerModel model_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Pending, std::vector<Pending>, LaterFirst> due_;
  std::deque<Pending> waiting_;
  unsigned inflight_ = 0;
  Clock::time_point link_free_at_;
  bool stopping_ = false;
  std::thread thread_;
};

struct State {
  int root_fd = -1;
  Nodes nodes;
  std::unique_ptr<DelayQueue> server;
  std::mutex mu;
  std::unordered_map<fuse_ino_t, uint64_t> opens;
  uint64_t total_opens = 0;
};

State& state(fuse_req_t req) { return *static_cast<State*>(fuse_req_userdata(req)); }

bool stat_path(State& s, const std::string& path, struct stat* st) {
  return fstatat(s.root_fd, path.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  State& s = state(req);
  fuse_entry_param e{};
  const fuse_ino_t ino = s.nodes.lookup(parent, name);
  if (!stat_path(s, s.nodes.path(ino), &e.attr)) {
    fuse_reply_err(req, errno);
    return;
  }
  e.ino = ino;
  e.attr_timeout = kAttrTimeout;
  e.entry_timeout = kAttrTimeout;
  if (!s.server->delays_metadata()) {
    fuse_reply_entry(req, &e);
    return;
  }
  Pending p;
  p.kind = Pending::Kind::kEntry;
  p.req = req;
  p.entry = e;
  s.server->submit(std::move(p));
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  State& s = state(req);
  Pending p;
  p.kind = Pending::Kind::kAttr;
  p.req = req;
  if (!stat_path(s, s.nodes.path(ino), &p.entry.attr)) {
    fuse_reply_err(req, errno);
    return;
  }
  p.entry.attr_timeout = kAttrTimeout;
  if (!s.server->delays_metadata()) {
    fuse_reply_attr(req, &p.entry.attr, kAttrTimeout);
    return;
  }
  s.server->submit(std::move(p));
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  State& s = state(req);
  char buf[PATH_MAX + 1];
  const ssize_t n = readlinkat(s.root_fd, s.nodes.path(ino).c_str(), buf, sizeof(buf) - 1);
  if (n < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  buf[n] = '\0';
  fuse_reply_readlink(req, buf);
}

// A directory's entries are read whole at opendir and kept with the handle.
struct DirListing {
  std::vector<std::pair<std::string, struct stat>> entries;
};

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  State& s = state(req);
  const int fd = openat(s.root_fd, s.nodes.path(ino).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    fuse_reply_err(req, ENOMEM);
    return;
  }
  auto listing = std::make_unique<DirListing>();
  while (dirent* d = readdir(dir)) {
    struct stat st {};

    st.st_ino = d->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(d->d_type));
    listing->entries.emplace_back(d->d_name, st);
  }
  closedir(dir);
  fi->fh = reinterpret_cast<uint64_t>(listing.release());
  fuse_reply_open(req, fi);
}

void op_readdir(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t offset, fuse_file_info* fi) {
  const auto* listing = reinterpret_cast<DirListing*>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  for (size_t i = static_cast<size_t>(offset); i < listing->entries.size(); ++i) {
    const auto& [name, st] = listing->entries[i];
    const size_t n = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                                       static_cast<off_t>(i + 1));
    if (n > size - used) {
      break;
    }
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  delete reinterpret_cast<DirListing*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  State& s = state(req);
  const int fd = openat(s.root_fd, s.nodes.path(ino).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fuse_reply_err(req, errno);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.opens[ino];
    ++s.total_opens;
  }
  Pending p;
  p.kind = Pending::Kind::kOpen;
  p.req = req;
  p.fd = fd;
  s.server->submit(std::move(p));
}

void op_read(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t offset, fuse_file_info* fi) {
  Pending p;
  p.kind = Pending::Kind::kRead;
  p.req = req;
  p.fd = static_cast<int>(fi->fh);
  p.size = size;
  p.offset = offset;

  struct stat st {};

  if (fstat(p.fd, &st) != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  p.bytes = offset >= st.st_size ? 0 : std::min(size, static_cast<size_t>(st.st_size - offset));
  state(req).server->submit(std::move(p));
}

void op_release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t /*ino*/) {
  struct statvfs st {};

  if (fstatvfs(state(req).root_fd, &st) != 0) {
    fuse_reply_err(req, errno);
    return;
  }
  fuse_reply_statfs(req, &st);
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (strcmp(name, kOpensXattr) != 0) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  State& s = state(req);
  std::string text;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.opens.find(ino);
    text = std::to_string(ino == FUSE_ROOT_ID   ? s.total_opens
                          : it == s.opens.end() ? 0
                                                : it->second);
  }
  if (size == 0) {
    fuse_reply_xattr(req, text.size());
  } else if (size < text.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, text.data(), text.size());
  }
}

void op_init(void* userdata, fuse_conn_info* conn) {
  // Read data is spliced from the file into the kernel's pipe, never copied through here.
  if ((conn->capable & FUSE_CAP_SPLICE_WRITE) != 0) {
    conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
  }
  static_cast<State*>(userdata)->server->start();
}

void op_destroy(void* userdata) { static_cast<State*>(userdata)->server->stop(); }

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.destroy = op_destroy;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.readlink = op_readlink;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.releasedir = op_releasedir;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.statfs = op_statfs;
  ops.getxattr = op_getxattr;
  return ops;
}

// One thread takes every request: none of them waits here, so one is enough and the
// emulation's CPU stays low.
int serve(State& s, const std::string& mountpoint) {
  const char* argv[] = {"epochfs-slowfs", "-o", "ro,fsname=slowfs,subtype=slowfs"};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  const fuse_lowlevel_ops ops = make_operations();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &s);
  if (se == nullptr) {
    return 1;
  }
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, mountpoint.c_str()) == 0) {
      rc = fuse_session_loop(se) == 0 ? 0 : 1;
      fuse_session_unmount(se);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  return rc;
}

// The model from --preset and the options that override it; nullopt (with a message) for an
// unknown preset.
struct Options {
  std::string preset;
  double latency_ms = 2;
  double open_latency_ms = -1;  // -1: latency_ms
  double meta_latency_ms = 0;
  double bandwidth_mbs = 0;
  unsigned max_inflight = 64;
};

void add_options(CLI::App& app, Options& o, std::vector<CLI::Option*>& overrides,
                 const std::string& names) {
  app.add_option("--preset", o.preset,
                 "Storage to model (" + names + "); the options below override its settings");
  overrides.push_back(
      app.add_option("--latency-ms", o.latency_ms, "Time to serve each open and read")
          ->check(CLI::Range(0.0, 10000.0)));
  app.add_option("--open-latency-ms", o.open_latency_ms,
                 "Time to serve each open, when it differs from --latency-ms")
      ->check(CLI::Range(0.0, 10000.0));
  overrides.push_back(
      app.add_option("--meta-latency-ms", o.meta_latency_ms, "Time to serve each lookup, getattr")
          ->check(CLI::Range(0.0, 10000.0)));
  overrides.push_back(
      app.add_option("--bandwidth-mbs", o.bandwidth_mbs, "Shared link speed in MB/s (0: no limit)")
          ->check(CLI::Range(0.0, 1e6)));
  overrides.push_back(app.add_option("--max-inflight", o.max_inflight, "Requests served at once")
                          ->check(CLI::Range(1, 100000)));
}

// Applies the preset to the settings the command line did not give.
bool apply_preset(Options& o, const std::vector<CLI::Option*>& overrides,
                  const std::string& names) {
  if (o.preset.empty()) {
    return true;
  }
  const auto* preset = epochfs::slowfs::find_storage_preset(o.preset);
  if (preset == nullptr) {
    fprintf(stderr, "epochfs-slowfs: no preset %s (there are: %s)\n", o.preset.c_str(),
            names.c_str());
    return false;
  }
  const auto given = [&](size_t i) { return overrides[i]->count() > 0; };
  o.latency_ms = given(0) ? o.latency_ms : preset->latency_ms;
  o.meta_latency_ms = given(1) ? o.meta_latency_ms : preset->meta_latency_ms;
  o.bandwidth_mbs = given(2) ? o.bandwidth_mbs : preset->bandwidth_mbs;
  o.max_inflight = given(3) ? o.max_inflight : preset->max_inflight;
  return true;
}

Clock::duration from_ms(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("A read-only FUSE passthrough with the latency of network storage (tests)");
  std::string source;
  std::string mountpoint;
  app.add_option("source", source)->required()->check(CLI::ExistingDirectory);
  app.add_option("mountpoint", mountpoint)->required()->check(CLI::ExistingDirectory);
  std::string names;
  for (const auto& p : epochfs::slowfs::kStoragePresets) {
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  Options o;
  std::vector<CLI::Option*> overrides;
  add_options(app, o, overrides, names);
  CLI11_PARSE(app, argc, argv);
  if (!apply_preset(o, overrides, names)) {
    return 2;
  }

  State s;
  s.root_fd = open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s.root_fd < 0) {
    fprintf(stderr, "epochfs-slowfs: %s: %s\n", source.c_str(), strerror(errno));
    return 1;
  }
  const double open_ms = o.open_latency_ms >= 0 ? o.open_latency_ms : o.latency_ms;
  s.server = std::make_unique<DelayQueue>(ServerModel{from_ms(o.latency_ms), from_ms(open_ms),
                                                      from_ms(o.meta_latency_ms),
                                                      o.bandwidth_mbs * 1e6, o.max_inflight});
  return serve(s, mountpoint);
}
