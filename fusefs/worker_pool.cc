#include "fusefs/worker_pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <system_error>
#include <thread>

#include "cachestore/log.h"
#include "cachestore/sync.h"
#include "fusefs/fuse_ops.h"
#include "fusefs/uring_transport.h"

namespace epochfs::fusefs {
namespace {

using cachestore::LogLevel;

// Wakes an idle worker from its read of the FUSE device. The handler is installed without
// SA_RESTART, so the read fails with EINTR. Sent only to a worker waiting for a request: in one
// serving a request it would interrupt that request's own system calls.
constexpr int kWakeSignal = SIGUSR2;

// How often the main thread looks at the session's exit flag, which libfuse's signal handlers
// set without waking anyone.
constexpr auto kExitPollPeriod = std::chrono::milliseconds(100);

// How often idle workers are woken again while the pool ends: a signal that comes just before
// a worker enters its read does not interrupt that read.
constexpr auto kWakeRetryPeriod = std::chrono::milliseconds(10);

void on_wake_signal(int /*sig*/) {}

void install_wake_handler() {
  struct sigaction sa = {};
  sa.sa_handler = on_wake_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(kWakeSignal, &sa, nullptr);
}

struct Worker {
  std::thread thread;
  std::atomic<bool> waiting{false};  // in, or about to enter, the read of the device
  std::atomic<bool> done{false};
};

class Pool {
 public:
  Pool(fuse_session* se, unsigned max_threads) : se_(se), max_threads_(std::max(1u, max_threads)) {}

  int run(const std::function<void()>& on_stop);

 private:
  bool start_worker() REQUIRES(mu_);
  void work(Worker* w);
  void took_request();
  void grow_for_ring();
  // Starts a worker if none is idle, or a ring queue has none waiting, within max_threads_.
  void grow_if(bool none_idle) REQUIRES(mu_);
  void finished_request();
  void end(int reason);
  void wake_until_all_left();

  fuse_session* const se_;
  const unsigned max_threads_;
  std::atomic<bool> stopping_{false};
  cachestore::Mutex mu_;
  cachestore::CondVar ended_cv_{&mu_};
  // A list: each worker keeps its address. Read without mu_ once no worker can start.
  std::list<Worker> workers_;
  unsigned idle_ GUARDED_BY(mu_) = 0;  // workers not serving a request
  bool ended_ GUARDED_BY(mu_) = false;
  int reason_ GUARDED_BY(mu_) = 0;
};

bool Pool::start_worker() {
  // Process-directed signals (TERM, INT, HUP, QUIT) are for the main thread: libfuse's handlers
  // are installed without SA_RESTART, so in a worker they would interrupt a request's reads.
  sigset_t blocked;
  sigset_t old;
  sigemptyset(&blocked);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    sigaddset(&blocked, sig);
  }
  pthread_sigmask(SIG_BLOCK, &blocked, &old);
  Worker& w = workers_.emplace_back();
  bool started = true;
  try {
    w.thread = std::thread([this, &w] { work(&w); });
    ++idle_;
  } catch (const std::system_error& e) {
    workers_.pop_back();
    started = false;
    cachestore::log(LogLevel::kWarning, "cannot start a FUSE worker: %s", e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return started;
}

void Pool::work(Worker* w) {
  cachestore::name_this_thread("epochfs-fuse");
  fuse_buf buf = {};
  for (;;) {
    // `waiting` is set before `stopping_` is read and cleared before it is read again, so the
    // main thread, which sets `stopping_` and then reads `waiting`, never signals a worker that
    // goes on to serve a request.
    w->waiting.store(true);
    if (stopping_.load()) {
      break;
    }
    const int res = fuse_session_receive_buf(se_, &buf);
    w->waiting.store(false);
    if (stopping_.load()) {
      break;  // a request read now is left unanswered: the connection ends with the daemon
    }
    if (res == -EINTR || res == -EAGAIN) {
      grow_for_ring();
      continue;
    }
    if (res <= 0) {
      // 0: the kernel ended the connection (ENODEV, after an unmount) or the session was told
      // to exit; ECONNABORTED: the connection was aborted.
      end(res);
      break;
    }
    took_request();
    fuse_session_process_buf(se_, &buf);
    finished_request();
  }
  free(buf.mem);
  w->done.store(true);
}

void Pool::took_request() {
  cachestore::MutexLock lock(mu_);
  --idle_;
  // Another worker waits for the next request while this one serves, so a slow request (a
  // source read) never holds up the others.
  grow_if(idle_ == 0);
}

void Pool::grow_for_ring() {
  cachestore::MutexLock lock(mu_);
  grow_if(false);
}

void Pool::grow_if(bool none_idle) {
  // Over io_uring each CPU's requests wait for a worker of its own queue (uring_transport.h):
  // one is started for a queue that has none waiting, at the start and as they get busy.
  if ((none_idle || uring::wants_worker()) && workers_.size() < max_threads_ && !stopping_.load()) {
    start_worker();
  }
}

void Pool::finished_request() {
  cachestore::MutexLock lock(mu_);
  ++idle_;
}

void Pool::end(int reason) {
  cachestore::MutexLock lock(mu_);
  if (!ended_) {
    ended_ = true;
    reason_ = reason;
  }
  ended_cv_.notify_all();
}

void Pool::wake_until_all_left() {
  for (;;) {
    bool all_left = true;
    for (Worker& w : workers_) {
      if (w.done.load()) {
        continue;
      }
      all_left = false;
      if (w.waiting.load()) {
        pthread_kill(w.thread.native_handle(), kWakeSignal);
      }
    }
    if (all_left) {
      return;
    }
    std::this_thread::sleep_for(kWakeRetryPeriod);
  }
}

int Pool::run(const std::function<void()>& on_stop) {
  install_wake_handler();
  {
    cachestore::MutexLock lock(mu_);
    if (!start_worker()) {
      return -EAGAIN;
    }
    while (!ended_ && fuse_session_exited(se_) == 0) {
      ended_cv_.wait_for(kExitPollPeriod);
    }
    // From here no worker is started, so workers_ is read without mu_.
    stopping_.store(true);
  }
  if (on_stop) {
    on_stop();
  }
  wake_until_all_left();
  for (Worker& w : workers_) {
    w.thread.join();
  }
  cachestore::MutexLock lock(mu_);
  return reason_;
}

}  // namespace

int serve_requests(fuse_session* se, unsigned max_threads, const std::function<void()>& on_stop) {
  Pool pool(se, max_threads);
  return pool.run(on_stop);
}

}  // namespace epochfs::fusefs
