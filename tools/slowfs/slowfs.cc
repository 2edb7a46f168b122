// epochfs-slowfs: a read-only FUSE passthrough that behaves like slow shared storage, for tests
// and benchmarks. Each open and each read request waits --latency-ms before it is answered,
// reads then pass one shared link of --bandwidth-mbs, and at most --max-inflight requests are
// served at once (libfuse's worker threads, like an NFS server's threads), so a reader that
// opens files one by one sees network-like latency while many requests in flight still get
// through. Waiting threads sleep: the emulation itself costs only the FUSE requests' CPU.
//
// It counts opens per file: getxattr("user.slowfs.opens") on a file gives how many times it
// was opened (on the root: over all files), which lets tests prove that a file was read from
// the source once.
//
// A test fixture, not part of the product: it uses libfuse's high-level API directly, which
// is why it is the one file outside fusefs/fuse_ops.h allowed to include libfuse
// (tools/dev/check.sh).
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
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <CLI/CLI.hpp>
#include <fuse3/fuse.h>

namespace {

constexpr char kOpensXattr[] = "user.slowfs.opens";

struct State {
  int root_fd = -1;
  std::chrono::microseconds latency{0};
  // One shared link: a read's bytes pass after those of the reads before it (0: no limit).
  double bytes_per_s = 0;
  std::chrono::steady_clock::time_point link_free_at;
  std::mutex mu;
  std::unordered_map<std::string, uint64_t> opens;
  uint64_t total_opens = 0;
};

State& state() { return *static_cast<State*>(fuse_get_context()->private_data); }

// The path relative to the source root, for the *at() calls.
const char* rel(const char* path) { return path[1] == '\0' ? "." : path + 1; }

void wait_latency() { std::this_thread::sleep_for(state().latency); }

// Waits until `bytes` have passed the shared link, behind the bytes of earlier reads.
void wait_link(size_t bytes) {
  State& s = state();
  if (s.bytes_per_s <= 0 || bytes == 0) {
    return;
  }
  const auto transfer = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / s.bytes_per_s));
  std::chrono::steady_clock::time_point done;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    done = std::max(std::chrono::steady_clock::now(), s.link_free_at) + transfer;
    s.link_free_at = done;
  }
  std::this_thread::sleep_until(done);
}

int op_getattr(const char* path, struct stat* st, fuse_file_info* /*fi*/) {
  return fstatat(state().root_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

int op_readlink(const char* path, char* buf, size_t size) {
  const ssize_t n = readlinkat(state().root_fd, rel(path), buf, size - 1);
  if (n < 0) {
    return -errno;
  }
  buf[n] = '\0';
  return 0;
}

int op_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t /*offset*/,
               fuse_file_info* /*fi*/, fuse_readdir_flags /*flags*/) {
  const int fd = openat(state().root_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    return -ENOMEM;
  }
  while (dirent* e = readdir(dir)) {
    if (fill(buf, e->d_name, nullptr, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) {
      break;
    }
  }
  closedir(dir);
  return 0;
}

int op_open(const char* path, fuse_file_info* fi) {
  wait_latency();
  const int fd = openat(state().root_fd, rel(path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  fi->fh = static_cast<uint64_t>(fd);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.opens[path];
  ++s.total_opens;
  return 0;
}

int op_read(const char* /*path*/, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  wait_latency();
  const ssize_t n = pread(static_cast<int>(fi->fh), buf, size, offset);
  if (n < 0) {
    return -errno;
  }
  wait_link(static_cast<size_t>(n));
  return static_cast<int>(n);
}

int op_release(const char* /*path*/, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  return 0;
}

int op_statfs(const char* /*path*/, struct statvfs* st) {
  return fstatvfs(state().root_fd, st) == 0 ? 0 : -errno;
}

int op_getxattr(const char* path, const char* name, char* value, size_t size) {
  if (strcmp(name, kOpensXattr) != 0) {
    return -ENODATA;
  }
  State& s = state();
  std::string text;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.opens.find(path);
    text = std::to_string(strcmp(path, "/") == 0 ? s.total_opens
                          : it == s.opens.end()  ? 0
                                                 : it->second);
  }
  if (size == 0) {
    return static_cast<int>(text.size());
  }
  if (size < text.size()) {
    return -ERANGE;
  }
  memcpy(value, text.data(), text.size());
  return static_cast<int>(text.size());
}

void* op_init(fuse_conn_info* /*conn*/, fuse_config* cfg) {
  // The source's inode numbers, not libfuse's own: those change when the kernel forgets an
  // inode, and a changed inode number means a changed file to a cache above (epochfs).
  cfg->use_ino = 1;
  return fuse_get_context()->private_data;
}

fuse_operations make_operations() {
  fuse_operations ops{};
  ops.init = op_init;
  ops.getattr = op_getattr;
  ops.readlink = op_readlink;
  ops.readdir = op_readdir;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.statfs = op_statfs;
  ops.getxattr = op_getxattr;
  return ops;
}

struct LoopConfigDeleter {
  void operator()(fuse_loop_config* cfg) const { fuse_loop_cfg_destroy(cfg); }
};

int serve(State& s, const std::string& mountpoint, unsigned max_inflight) {
  const char* argv[] = {"epochfs-slowfs", "-o", "ro,fsname=slowfs,subtype=slowfs"};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  const fuse_operations ops = make_operations();
  fuse* f = fuse_new(&args, &ops, sizeof(ops), &s);
  if (f == nullptr) {
    return 1;
  }
  int rc = 1;
  if (fuse_mount(f, mountpoint.c_str()) == 0) {
    fuse_set_signal_handlers(fuse_get_session(f));
    std::unique_ptr<fuse_loop_config, LoopConfigDeleter> cfg(fuse_loop_cfg_create());
    fuse_loop_cfg_set_max_threads(cfg.get(), max_inflight);
    fuse_loop_cfg_set_idle_threads(cfg.get(), max_inflight);
    rc = fuse_loop_mt(f, cfg.get()) == 0 ? 0 : 1;
    fuse_remove_signal_handlers(fuse_get_session(f));
    fuse_unmount(f);
  }
  fuse_destroy(f);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("A read-only FUSE passthrough with the latency of network storage (tests)");
  std::string source;
  std::string mountpoint;
  double latency_ms = 2;
  unsigned max_inflight = 64;
  app.add_option("source", source)->required()->check(CLI::ExistingDirectory);
  app.add_option("mountpoint", mountpoint)->required()->check(CLI::ExistingDirectory);
  app.add_option("--latency-ms", latency_ms, "Wait before answering each open and read")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--max-inflight", max_inflight, "Requests served at once")
      ->check(CLI::Range(1, 1024));
  double bandwidth_mbs = 0;
  app.add_option("--bandwidth-mbs", bandwidth_mbs, "Shared link speed in MB/s (0: no limit)")
      ->check(CLI::Range(0.0, 1e6));
  CLI11_PARSE(app, argc, argv);

  State s;
  s.root_fd = open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s.root_fd < 0) {
    fprintf(stderr, "epochfs-slowfs: %s: %s\n", source.c_str(), strerror(errno));
    return 1;
  }
  s.latency = std::chrono::microseconds(static_cast<int64_t>(latency_ms * 1000));
  s.bytes_per_s = bandwidth_mbs * 1e6;
  return serve(s, mountpoint, max_inflight);
}
