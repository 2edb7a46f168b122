#include "fusefs/passthrough.h"

#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

#include "cachestore/log.h"
#include "cachestore/status.h"
#include "fusefs/fuse_abi.h"
#include "fusefs/uring_transport.h"

namespace epochfs::fusefs::passthrough {
namespace {

using cachestore::LogLevel;

// The parts of the kernel ABI (protocol 7.40) that Debian 12's linux/fuse.h (7.38) lacks.
namespace abi {
using fusefs::abi::InitOut;
using fusefs::abi::kPassthroughFlag2;
constexpr uint32_t kOpenPassthrough = 1u << 7;  // FOPEN_PASSTHROUGH
// The backing file (the cache's copy, or a source file, on a local disk filesystem: see
// Filesystem::source_is_local) is one level below the mount.
constexpr uint32_t kMaxStackDepth = 1;

struct OpenOut {  // struct fuse_open_out
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};

static_assert(sizeof(OpenOut) == 16);

struct BackingMap {  // struct fuse_backing_map
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};

constexpr unsigned long kBackingOpen = _IOW(FUSE_DEV_IOC_MAGIC, 1, BackingMap);
constexpr unsigned long kBackingClose = _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t);
}  // namespace abi

// One FUSE session per process: the custom I/O callbacks reach this state, not the session.
struct State {
  std::atomic<bool> wanted{false};
  std::atomic<bool> init_seen{false};
  std::atomic<uint64_t> init_unique{0};
  std::atomic<bool> offered{false};
  std::atomic<bool> negotiated{false};
  std::atomic<bool> disabled{false};
  std::atomic<int> dev_fd{-1};
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> source_opens{0};
  std::atomic<const char*> why{"not requested (--data-path classic)"};
};

State& state() {
  static State s;
  return s;
}

// The backing id the OPEN reply being sent on this thread carries (0: none).
thread_local uint32_t t_reply_backing = 0;

// Notes the kernel's INIT request: does it offer passthrough? A test can make it say no.
void inspect_request(const void* buf, size_t len) {
  State& s = state();
  if (s.init_seen.load() || len < sizeof(fuse_in_header)) {
    return;
  }
  const auto* in = static_cast<const fuse_in_header*>(buf);
  if (in->opcode != FUSE_INIT) {
    return;
  }
  bool offered = false;
  if (len >= sizeof(fuse_in_header) + sizeof(fuse_init_in)) {
    const auto* init = reinterpret_cast<const fuse_init_in*>(in + 1);
    offered = (init->flags & FUSE_INIT_EXT) != 0 && (init->flags2 & abi::kPassthroughFlag2) != 0;
  }
  // Read while the session starts, before any thread could change the environment.
  if (getenv("EPOCHFS_TEST_DENY_PASSTHROUGH") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
    offered = false;
  }
  s.offered = offered;
  s.init_unique = in->unique;
  s.init_seen = true;
}

// Completes a reply on its way to the kernel: passthrough in the INIT reply, a backing id in
// the OPEN reply the current thread is sending.
void complete_reply(int fd, struct iovec* iov, int count) {
  if (count < 2) {
    return;
  }
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  if (out->error != 0) {
    return;
  }
  if (t_reply_backing != 0 && iov[1].iov_len >= sizeof(abi::OpenOut)) {
    auto* open = static_cast<abi::OpenOut*>(iov[1].iov_base);
    // The kernel reads the backing file's own pages: FOPEN_KEEP_CACHE (this inode's pages)
    // does not apply, and the kernel refuses an open that carries both.
    open->open_flags =
        (open->open_flags & ~static_cast<uint32_t>(FOPEN_KEEP_CACHE)) | abi::kOpenPassthrough;
    open->backing_id = static_cast<int32_t>(t_reply_backing);
    return;
  }
  State& s = state();
  if (!s.init_seen.load() || s.negotiated.load() || out->unique != s.init_unique.load()) {
    return;
  }
  if (!s.wanted.load()) {
    return;
  }
  if (!s.offered.load() || iov[1].iov_len < sizeof(abi::InitOut)) {
    s.why = "the kernel does not offer it (Linux 6.9 or later with CONFIG_FUSE_PASSTHROUGH)";
    cachestore::log(LogLevel::kInfo, "data path: classic (passthrough: %s)", s.why.load());
    return;
  }
  auto* init = static_cast<abi::InitOut*>(iov[1].iov_base);
  init->flags |= FUSE_INIT_EXT;
  init->flags2 |= abi::kPassthroughFlag2;
  init->max_stack_depth = abi::kMaxStackDepth;
  s.dev_fd = fd;
  s.why = "";
  s.negotiated = true;
  cachestore::log(LogLevel::kInfo,
                  "data path: kernel passthrough (cached copies; misses too on a local source)");
}

ssize_t io_read(int fd, void* buf, size_t len, void* /*userdata*/) {
  const ssize_t n = uring::wanted() ? uring::read(fd, buf, len) : ::read(fd, buf, len);
  if (n > 0) {
    inspect_request(buf, static_cast<size_t>(n));
    uring::inspect_request(buf, static_cast<size_t>(n));
  }
  return n;
}

ssize_t io_writev(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  complete_reply(fd, iov, count);
  if (!uring::wanted()) {
    return ::writev(fd, iov, count);
  }
  const bool ring = uring::accept_in_init_reply(iov, count);
  const ssize_t n = uring::writev(fd, iov, count);
  if (ring && n >= 0) {
    uring::start(fd);  // the kernel has processed INIT: entries may be registered
  }
  return n;
}

ssize_t io_splice(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned flags,
                  void* /*userdata*/) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

// Registers fd as a backing file; its id, or 0 (then passthrough may be off for good).
uint32_t register_backing(int fd, bool from_cache) {
  State& s = state();
  abi::BackingMap map{fd, 0, 0};
  const int id = ioctl(s.dev_fd.load(), abi::kBackingOpen, &map);
  if (id > 0) {
    return static_cast<uint32_t>(id);
  }
  const int err = errno;
  if (err == EPERM || err == ENOTTY || (err == EINVAL && from_cache)) {
    // No privilege (CAP_SYS_ADMIN) or no support: every later registration would fail too.
    s.disabled = true;
    s.why = err == EPERM ? "registering a backing file needs CAP_SYS_ADMIN"
                         : "the kernel refused to register a backing file";
    cachestore::log(LogLevel::kWarning, "data path: classic from now on (passthrough: %s)",
                    s.why.load());
  } else {
    // This file only (a source file the kernel will not read through): a classic open.
    cachestore::log(LogLevel::kDebug, "passthrough: backing file refused: %s",
                    cachestore::error_text(err).c_str());
  }
  return 0;
}

void unregister_backing(uint32_t backing_id) {
  ioctl(state().dev_fd.load(), abi::kBackingClose, &backing_id);
}

OpenTable& table() {
  static OpenTable t(register_backing, unregister_backing);
  return t;
}

}  // namespace

bool install(fuse_session* se, DataPath path) {
  State& s = state();
  if (path == DataPath::kClassic || path == DataPath::kNoOpen) {
    s.why = path == DataPath::kNoOpen ? "not requested (--data-path no-open)"
                                      : "not requested (--data-path classic)";
  } else {
    s.wanted = true;
    s.why = "the kernel has not answered INIT yet";
  }
  if (!s.wanted.load() && !uring::wanted()) {
    return true;
  }
  fuse_custom_io io{};
  io.read = io_read;
  io.writev = io_writev;
  // A reply through the ring is copied into its entry: no splicing into the device then.
  io.splice_send = uring::wanted() ? nullptr : io_splice;
  io.splice_receive = uring::wanted() ? nullptr : io_splice;
  if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) {
    s.wanted = false;
    s.why = "libfuse refused the custom I/O";
    return false;
  }
  return true;
}

bool active() {
  const State& s = state();
  return s.negotiated.load() && !s.disabled.load();
}

const char* why_not() { return state().why.load(); }

Opened begin_open(uint64_t ino, int fd, Backing backing, const cachestore::FileVersion& version) {
  State& s = state();
  if (!s.negotiated.load()) {
    return {};
  }
  const Opened opened = table().begin(ino, fd, backing, version, !s.disabled.load());
  if (opened.backing_id != 0) {
    s.opens.fetch_add(1, std::memory_order_relaxed);
    s.source_opens.fetch_add(opened.reads_source ? 1 : 0, std::memory_order_relaxed);
  }
  return opened;
}

void end_open(uint64_t ino, uint32_t backing_id) {
  if (state().negotiated.load()) {
    table().end(ino, backing_id);
  }
}

uint64_t backing_files() { return table().backing_files(); }

int reply_open(fuse_req_t req, const fuse_file_info* fi, uint32_t backing_id) {
  t_reply_backing = backing_id;
  const int rc = fuse_reply_open(req, fi);
  t_reply_backing = 0;
  return rc;
}

uint64_t opens() { return state().opens.load(std::memory_order_relaxed); }

uint64_t source_opens() { return state().source_opens.load(std::memory_order_relaxed); }

}  // namespace epochfs::fusefs::passthrough
