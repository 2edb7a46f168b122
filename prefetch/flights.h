// Flights: the copies into the cache in progress, at most one per file, so that a file is
// copied once however many readers and prefetches want it.
//
// A prefetch's flight begins when its job is queued (begin_prefetch) and starts when the job
// runs (start_prefetch). A reader that misses claims the file's flight before it reads the
// source: it gets a new flight, or takes over a prefetch still waiting in the stager's queue
// (which then skips itself: a reader must not wait behind queued prefetches), or is told to
// wait for the copy already running. A flight's owner ends it on every way out.
//
// A waiter gives up on a copy that the caller's `stuck` judges stuck by how long it has made no
// progress (a hung cache disk or source, or a copy queued behind stuck ones) and reads the
// source itself; copies stuck since long ago are given up on at once, so a hung disk costs a
// trainer one wait, not one per file.
//
// Waiters sleep on one of kStripes condition variables, chosen by file id: a flight's end
// wakes the readers of its stripe, not every reader waiting on any copy (with one variable,
// each waiting DataLoader worker woke for every copy that ended: ~50 wake-ups per wait).
//
// A reader killed while it waits stops waiting within a poll: the kernel holds a killed
// process until its request is answered.
//
// Time comes from an injected clock, so that the policy is tested without waiting.
// Thread-safety: every method may be called from any thread; one lock, held for memory work.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>

#include "cachestore/file_id.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

class Flights {
 public:
  using Clock = std::function<int64_t()>;  // nanoseconds, monotonic

  // poll: how often a waiter looks at the clock while no flight ends.
  explicit Flights(Clock clock = cachestore::now_ns,
                   std::chrono::milliseconds poll = std::chrono::milliseconds(100))
      : clock_(std::move(clock)), poll_(poll) {
    for (size_t i = 0; i < kStripes; ++i) {
      done_.emplace_back(&mu_);
    }
  }

  enum class Claim { kOwned, kInFlight };
  // A reader's claim on id's copy: a new flight (or a queued prefetch's, taken over) that the
  // caller owns and ends, or the copy already running.
  Claim claim(cachestore::FileId id);

  // A prefetch flight for id, queued: its generation, or 0 if id already has a flight.
  uint64_t begin_prefetch(cachestore::FileId id);
  // The queued prefetch of generation gen begins to copy: false if a reader took it over.
  bool start_prefetch(cachestore::FileId id, uint64_t gen);

  // Ends id's flight (only generation gen's, if gen is not 0) and wakes its waiters.
  void end(cachestore::FileId id, uint64_t gen = 0);

  // Whether id has a flight, queued or running; for many ids, under one hold of the lock.
  bool has(cachestore::FileId id);
  std::vector<bool> has_each(const std::vector<cachestore::FileId>& ids);

  // id's copy read or wrote another piece: it is not stuck.
  void note_progress(cachestore::FileId id);

  enum class Wait {
    kNoFlight,   // none was in flight
    kEnded,      // the flight ended
    kStuck,      // the copy made no progress for as long as `stuck` allows: given up on
    kTimedOut,   // waited max_wait
    kCancelled,  // the request waiting was interrupted (its reader killed): prefetch/cancel.h
  };
  // Whether a copy that has made no progress for idle_ns is stuck. Called with the lock held:
  // it must take no lock of its own that is ever held around a call into Flights.
  using Stuck = std::function<bool(int64_t idle_ns)>;

  // Waits for id's flight to end; adds the time waited to *stall_ns. A waiter looks at its
  // request's Cancel every poll.
  Wait wait(cachestore::FileId id, int64_t max_wait_ns, const Stuck& stuck, uint64_t* stall_ns);

  // Prefetch flights queued or running (the planner's slots). One a reader took over counts
  // until its job leaves the queue: slots bound the prefetch jobs queued, live or not, so they
  // never crowd readers' copies out of the stager's queue.
  unsigned prefetches();

 private:
  struct Flight {
    bool prefetch = false;  // a prefetch copy (counted against the planner's slots)
    bool started = false;   // its copy is running; before that a reader may take it over
    uint64_t gen = 0;
    int64_t progress_ns = 0;  // when it was made, started, or last read or wrote a piece
  };

  static constexpr size_t kStripes = 64;

  cachestore::CondVar& done_for(cachestore::FileId id) { return done_[id % kStripes]; }

  const Clock clock_;
  const std::chrono::milliseconds poll_;
  cachestore::Mutex mu_;
  std::deque<cachestore::CondVar> done_;  // kStripes of them, made once; bound to mu_
  std::unordered_map<cachestore::FileId, Flight> flights_ GUARDED_BY(mu_);
  uint64_t next_gen_ GUARDED_BY(mu_) = 1;
  unsigned prefetches_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::prefetch
