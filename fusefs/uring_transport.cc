#include "fusefs/uring_transport.h"

#include <errno.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cachestore/log.h"
#include "cachestore/status.h"
#include "fusefs/fuse_abi.h"
#include "fusefs/uring_entry.h"

namespace epochfs::fusefs::uring {
namespace {

using cachestore::LogLevel;

// How long a worker waits for a request before it looks whether its pool is stopping.
constexpr long long kWaitNs = 50'000'000;

// Each worker waits on a ring of its own (RingEntry) with one entry of one queue: the kernel
// copies a request into an entry in the task that submitted the entry's command, so a ring
// that workers shared woke two threads a request (measured slower than /dev/fuse), while a
// worker that answers and waits in the same thread takes one wake-up, as read(2) does. And a
// worker holding its entry has no other, so no request waits behind a slow one.

struct State {
  std::atomic<bool> wanted{false};
  std::atomic<bool> init_seen{false};
  std::atomic<bool> offered{false};
  std::atomic<uint64_t> init_unique{0};
  std::atomic<size_t> payload_size{0};
  std::atomic<bool> active{false};
  std::atomic<const char*> why{"not requested (--fuse-transport device)"};
  std::atomic<int> dev_fd{-1};
  std::atomic<unsigned> queues{1};
  std::atomic<unsigned> rings{0};  // made so far (the first also reads the device)
  std::atomic<uint64_t> ring_requests{0};
  std::atomic<uint64_t> device_requests{0};
  unsigned max_workers = 0;
  // Per queue, the workers whose entry waits for a request: a queue with none holds its
  // CPU's requests in the kernel (no other queue takes them), so the pool starts a worker
  // for it (wants_worker).
  std::mutex idle_mu;
  std::vector<unsigned> idle;    // by queue
  std::vector<unsigned> worker;  // workers by queue

  // The queue a new worker serves: the one with the fewest workers waiting, then the fewest.
  uint16_t pick_queue() {
    std::lock_guard lock(idle_mu);
    size_t best = 0;
    for (size_t q = 1; q < idle.size(); ++q) {
      if (idle[q] < idle[best] || (idle[q] == idle[best] && worker[q] < worker[best])) {
        best = q;
      }
    }
    ++worker[best];
    ++idle[best];  // the new worker is about to wait: no second one for the same queue
    return static_cast<uint16_t>(best);
  }

  void count_idle(uint16_t qid, int delta) {
    std::lock_guard lock(idle_mu);
    idle[qid] = static_cast<unsigned>(static_cast<int>(idle[qid]) + delta);
  }
};

State& state() {
  static State s;
  return s;
}

thread_local std::unique_ptr<RingEntry> t_entry;
thread_local bool t_counted_idle = false;  // pick_queue counted the new worker waiting

// The CPUs the kernel may run on: it keeps one queue per possible CPU ("0-1", "0-3,8-11").
unsigned possible_cpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  std::getline(in, text);
  unsigned count = 0;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string range = text.substr(at, comma - at);
    const size_t dash = range.find('-');
    const auto first = static_cast<unsigned>(std::stoul(range.substr(0, dash)));
    const auto last = dash == std::string::npos
                          ? first
                          : static_cast<unsigned>(std::stoul(range.substr(dash + 1)));
    count = std::max(count, last + 1);
    at = comma + 1;
  }
  return std::max(count, 1u);
}

// This worker's entry, made at its first call, on a queue that needs a worker.
RingEntry* worker_entry() {
  if (t_entry) {
    return t_entry.get();
  }
  State& s = state();
  const bool first = s.rings.fetch_add(1) == 0;
  const uint16_t qid = s.pick_queue();
  t_counted_idle = true;
  // On its queue's CPU: the thread that sent a request wakes this one on the same core.
  // Measured: a request's round trip 13-14 us pinned, 16-48 unpinned, 23-28 by /dev/fuse.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(qid, &cpus);
  sched_setaffinity(0, sizeof(cpus), &cpus);  // an offline CPU refuses: no requests come then
  t_entry = RingEntry::make(s.dev_fd.load(), qid, s.payload_size.load(), first);
  return t_entry.get();
}

// A request from /dev/fuse while the ring is not in use yet: waits a while at most, so that a
// worker waiting here takes its entry once the ring is in use.
ssize_t read_device(int fd, void* buf, size_t len) {
  if (state().wanted.load()) {
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(kWaitNs / 1'000'000));
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    if (n < 0) {
      return -1;
    }
  }
  return ::read(fd, buf, len);
}

// Whether this process may make a ring of the kind each worker makes (RingEntry).
bool rings_can_be_made() {
  io_uring ring;
  io_uring_params params = {};
  params.flags = IORING_SETUP_SQE128;
  if (io_uring_queue_init_params(1, &ring, &params) < 0) {
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

// Requests come by the device alone, as without the option; false.
bool refuse(const char* why) {
  state().why = why;
  state().wanted = false;
  cachestore::log(LogLevel::kWarning, "fuse transport: /dev/fuse (io_uring: %s)", why);
  return false;
}

// Handles one completion; the request's length in buf, 0 for none yet, -1 with errno.
ssize_t take(RingEntry& e, uint64_t tag, int res, char* buf, size_t len) {
  State& s = state();
  if (tag == RingEntry::kDeviceRead) {
    if (res > 0) {
      s.device_requests.fetch_add(1, std::memory_order_relaxed);
      return static_cast<ssize_t>(e.take_device_request(buf, len, static_cast<size_t>(res)));
    }
    if (res == -EINTR || res == -EAGAIN || res == -ENOENT) {
      e.read_device_again();
      return 0;
    }
    errno = -res;
    return -1;
  }
  if (res == -ENOTCONN || res == -ECONNABORTED || res == -ENODEV) {
    errno = ENODEV;  // the connection ended
    return -1;
  }
  if (res == -EAGAIN || res == -EINTR) {
    e.register_again();  // registered before the kernel had processed INIT
    return 0;
  }
  if (res < 0) {
    cachestore::log(LogLevel::kWarning, "fuse ring: entry: %s",
                    cachestore::error_text(-res).c_str());
    return 0;
  }
  s.ring_requests.fetch_add(1, std::memory_order_relaxed);
  return static_cast<ssize_t>(e.take_request(buf, len));
}

// Waits for the next request into e (or the device read); as read().
ssize_t wait_request(RingEntry& e, char* buf, size_t len) {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec wait{0, kWaitNs};
    const int rc = io_uring_wait_cqe_timeout(e.ring(), &cqe, &wait);
    if (rc == -ETIME || rc == -EINTR || rc == -EAGAIN) {
      errno = rc == -EINTR ? EINTR : EAGAIN;
      return -1;
    }
    if (rc < 0) {
      errno = -rc;
      return -1;
    }
    const uint64_t tag = cqe->user_data;
    const int res = cqe->res;
    io_uring_cqe_seen(e.ring(), cqe);
    const ssize_t n = take(e, tag, res, buf, len);
    if (n != 0) {
      return n;
    }
  }
}

}  // namespace

void want(unsigned max_workers) {
  state().max_workers = max_workers;
  state().wanted = true;
  state().why = "the kernel has not answered INIT yet";
}

bool wanted() { return state().wanted.load(); }

bool active() { return state().active.load(); }

const char* why_not() { return state().why.load(); }

uint64_t ring_requests() { return state().ring_requests.load(std::memory_order_relaxed); }

uint64_t device_requests() { return state().device_requests.load(std::memory_order_relaxed); }

void inspect_request(const void* buf, size_t len) {
  State& s = state();
  if (!s.wanted.load() || s.init_seen.load() || len < sizeof(fuse_in_header)) {
    return;
  }
  const auto* in = static_cast<const fuse_in_header*>(buf);
  if (in->opcode != FUSE_INIT) {
    return;
  }
  if (len >= sizeof(fuse_in_header) + sizeof(fuse_init_in)) {
    const auto* init = reinterpret_cast<const fuse_init_in*>(in + 1);
    s.offered = (init->flags & FUSE_INIT_EXT) != 0 && (init->flags2 & abi::kOverIoUringFlag2) != 0;
  }
  s.init_unique = in->unique;
  s.init_seen = true;
}

bool accept_in_init_reply(struct iovec* iov, int count) {
  State& s = state();
  if (!s.init_seen.load() || count < 2 || iov[1].iov_len < sizeof(abi::InitOut)) {
    return false;
  }
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  if (out->unique != s.init_unique.load() || out->error != 0) {
    return false;
  }
  if (!s.offered.load()) {
    return refuse("the kernel does not offer it (Linux 6.14 or later, fuse module enable_uring=1)");
  }
  if (possible_cpus() > s.max_workers) {
    // Every queue needs a worker of its own before the kernel serves any request.
    return refuse("more CPUs than FUSE workers (--threads)");
  }
  if (!rings_can_be_made()) {
    // Accepted, the kernel would wait for entries that can never be registered: a hung mount.
    return refuse("io_uring refused a ring (kernel.io_uring_disabled, or a seccomp filter)");
  }
  auto* init = static_cast<abi::InitOut*>(iov[1].iov_base);
  // The kernel's rule for an entry's payload: room for the largest write and read.
  const size_t pages = (init->flags & FUSE_MAX_PAGES) != 0 ? init->max_pages : 32;
  s.payload_size = std::max<size_t>({8192, init->max_write, pages * 4096});
  init->flags |= FUSE_INIT_EXT;
  init->flags2 |= abi::kOverIoUringFlag2;
  return true;
}

void start(int dev_fd) {
  State& s = state();
  s.dev_fd = dev_fd;
  s.queues = possible_cpus();
  {
    std::lock_guard lock(s.idle_mu);
    s.idle.assign(s.queues.load(), 0);
    s.worker.assign(s.queues.load(), 0);
  }
  s.why = "";
  s.active = true;
  cachestore::log(LogLevel::kInfo, "fuse transport: io_uring, %u queues", s.queues.load());
}

ssize_t read(int dev_fd, void* buf, size_t len) {
  State& s = state();
  if (!s.active.load()) {
    return read_device(dev_fd, buf, len);
  }
  RingEntry* e = worker_entry();
  if (e == nullptr) {
    errno = EIO;
    return -1;
  }
  if (!t_counted_idle) {
    s.count_idle(e->qid(), 1);
  }
  t_counted_idle = false;
  const ssize_t n = wait_request(*e, static_cast<char*>(buf), len);
  s.count_idle(e->qid(), -1);
  return n;
}

bool wants_worker() {
  State& s = state();
  if (!s.active.load()) {
    return false;
  }
  std::lock_guard lock(s.idle_mu);
  return std::find(s.idle.begin(), s.idle.end(), 0u) != s.idle.end();
}

ssize_t writev(int dev_fd, const struct iovec* iov, int count) {
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  RingEntry* e = t_entry.get();
  // A reply is sent by the worker that read its request (libfuse answers within the call).
  if (e == nullptr || !e->holds(out->unique)) {
    return ::writev(dev_fd, iov, count);
  }
  if (!e->reply(iov, count)) {
    errno = EIO;
    return -1;
  }
  size_t total = 0;
  for (int i = 0; i < count; ++i) {
    total += iov[i].iov_len;
  }
  return static_cast<ssize_t>(total);
}

}  // namespace epochfs::fusefs::uring
