// IdBatches: files to work on ahead of their opens (their attributes read, their copies' pages
// asked for), queued for as few stager jobs as keep up with them.
//
// One job per file woke a stager thread per file (four futex calls and a context switch each,
// more than the stat itself on a local or cached source; batches took the daemon's syscalls
// per hit of the DataLoader bench from 35.6 to 29.4). Here a job is
// started only when none runs or the queue holds more than a batch per running job (up to a
// limit); each job takes a batch at a time until the queue is empty.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

class IdBatches {
 public:
  // max_queued: ids beyond it are dropped (work that is only worth doing soon); max_jobs: at
  // most that many jobs at once (work that queues on a shared device).
  explicit IdBatches(size_t batch, size_t max_queued = SIZE_MAX, size_t max_jobs = SIZE_MAX)
      : batch_(batch == 0 ? 1 : batch),
        max_queued_(max_queued),
        max_jobs_(max_jobs == 0 ? 1 : max_jobs) {}

  // Queues id. True if the caller is to start a job that calls take() until it returns
  // nothing (or, if the job could not be started, to call not_started()).
  bool push(cachestore::FileId id) {
    cachestore::MutexLock lock(mu_);
    if (queue_.size() >= max_queued_) {
      return false;  // dropped
    }
    queue_.push_back(id);
    if (jobs_ == 0 || (queue_.size() > jobs_ * batch_ && jobs_ < max_jobs_)) {
      ++jobs_;
      return true;
    }
    return false;
  }

  // The next batch for a job; empty when the queue is, and the job then ends.
  std::vector<cachestore::FileId> take() {
    cachestore::MutexLock lock(mu_);
    const size_t n = queue_.size() < batch_ ? queue_.size() : batch_;
    std::vector<cachestore::FileId> out(queue_.begin(), queue_.begin() + n);
    queue_.erase(queue_.begin(), queue_.begin() + n);
    if (out.empty()) {
      --jobs_;
    }
    return out;
  }

  // A job push() asked for was not started (the stager was full): the next push starts one.
  void not_started() {
    cachestore::MutexLock lock(mu_);
    --jobs_;
  }

  size_t queued() const {
    cachestore::MutexLock lock(mu_);
    return queue_.size();
  }

 private:
  const size_t batch_;
  const size_t max_queued_;
  const size_t max_jobs_;
  mutable cachestore::Mutex mu_;
  std::deque<cachestore::FileId> queue_ GUARDED_BY(mu_);
  size_t jobs_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::prefetch
