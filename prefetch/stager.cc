#include "prefetch/stager.h"

#include <memory>

#include <boost/asio/post.hpp>

#include "cachestore/log.h"

namespace epochfs::prefetch {
namespace {

// Copies are background work: a reader waiting on the source must win the CPU and the disk.
// So each pool thread runs at background priority (cachestore/sync.h).
bool lower_thread_priority() {
  cachestore::name_this_thread("epochfs-stage");
  cachestore::lower_this_thread_priority();
  return true;
}

}  // namespace

Stager::Stager(unsigned threads, unsigned max_pending, Grace* grace)
    : max_pending_(max_pending), grace_(grace), pool_(threads) {}

Stager::~Stager() { shutdown(); }

bool Stager::try_submit(std::function<void()> job, Priority priority) {
  if (stopping_.load(std::memory_order_acquire)) {
    return false;
  }
  if (pending_.fetch_add(1, std::memory_order_relaxed) >= max_pending_) {
    pending_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  try {
    if (grace_ != nullptr) {
      // The ticket goes with the job, run or dropped: an id it holds is not handed out again
      // meanwhile.
      job = [ticket = std::make_shared<Grace::Ticket>(*grace_), job = std::move(job)] { job(); };
    }
    cachestore::MutexLock lock(mu_);
    (priority == Priority::kDemand ? demand_ : prefetch_).push_back(std::move(job));
  } catch (...) {
    pending_.fetch_sub(1, std::memory_order_relaxed);  // out of memory: not queued
    throw;
  }
  // Should posting fail, the queued job runs with the next job's runner.
  boost::asio::post(pool_, [this] { run_one(); });
  return true;
}

void Stager::run_one() {
  thread_local const bool lowered = lower_thread_priority();
  (void)lowered;
  std::function<void()> job;
  {
    cachestore::MutexLock lock(mu_);
    auto& queue = demand_.empty() ? prefetch_ : demand_;
    if (queue.empty()) {
      return;
    }
    job = std::move(queue.front());
    queue.pop_front();
  }
  // Acquire pairs with shutdown's release: after stop, queued copies are skipped.
  if (!stopping_.load(std::memory_order_acquire)) {
    // An exception must not leave a pool thread (std::terminate). A job that holds a flight
    // ends it on every way out (engine.cc), so a throw costs that one copy.
    try {
      job();
    } catch (const std::exception& e) {
      jobs_failed_.fetch_add(1, std::memory_order_relaxed);
      cachestore::log(cachestore::LogLevel::kError, "stager: a copy job failed: %s", e.what());
    } catch (...) {
      jobs_failed_.fetch_add(1, std::memory_order_relaxed);
      cachestore::log(cachestore::LogLevel::kError, "stager: a copy job failed");
    }
  }
  job = nullptr;  // release what the job holds (descriptors) before counting it done
  pending_.fetch_sub(1, std::memory_order_relaxed);
}

void Stager::shutdown() {
  stopping_.store(true, std::memory_order_release);
  pool_.stop();
  pool_.join();
  cachestore::MutexLock lock(mu_);
  pending_.fetch_sub(static_cast<unsigned>(demand_.size() + prefetch_.size()),
                     std::memory_order_relaxed);
  demand_.clear();
  prefetch_.clear();
}

}  // namespace epochfs::prefetch
