// Stager: runs copies into the cache on a bounded pool of blocking I/O threads.
//
// Copies never run on FUSE worker threads: a slow source read must not hold a thread the
// kernel needs for foreground requests. The number of copies queued or running is bounded;
// a copy beyond the bound is dropped (a copy is a hint: the reader is already served from
// the source). Boost 1.74's Asio has no file I/O, so the pool's threads simply block in
// pread/write (STYLE.md section 5).
//
// Shutdown: shutdown() (or the destructor) drops queued copies, waits for running ones, and
// joins every thread. No thread is detached.
//
// Two priorities: copies a reader is waiting for, or that a reader's miss started (demand), run
// before prefetch copies. Each submitted job posts one runner to the Asio pool, and a runner
// takes the most urgent job queued at the time it runs, so priority holds whatever order
// the pool runs its handlers in.
//
// Thread-safety: try_submit and pending may be called from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <functional>

#include <boost/asio/thread_pool.hpp>

#include "cachestore/sync.h"
#include "prefetch/grace.h"

namespace epochfs::prefetch {

class Stager {
 public:
  // grace: each job holds a ticket of it from its queueing to its end (prefetch/grace.h).
  Stager(unsigned threads, unsigned max_pending, Grace* grace = nullptr);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  enum class Priority { kDemand, kPrefetch };

  // Queues job unless max_pending jobs are already queued or running. False if dropped.
  bool try_submit(std::function<void()> job, Priority priority = Priority::kDemand);

  unsigned pending() const { return pending_.load(std::memory_order_relaxed); }

  // Jobs that threw (out of memory, a bug): logged and counted; the pool thread lives on.
  uint64_t jobs_failed() const { return jobs_failed_.load(std::memory_order_relaxed); }

  void shutdown();

  // True once shutdown began: a long job ends early.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

 private:
  const unsigned max_pending_;
  Grace* const grace_;
  // Relaxed: only a bound on queue length; an off-by-one at the edge drops or keeps one hint.
  std::atomic<unsigned> pending_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> jobs_failed_{0};
  cachestore::Mutex mu_;
  std::deque<std::function<void()>> demand_ GUARDED_BY(mu_);
  std::deque<std::function<void()>> prefetch_ GUARDED_BY(mu_);
  boost::asio::thread_pool pool_;

  void run_one();
};

}  // namespace epochfs::prefetch
