#include "prefetch/flights.h"

#include "prefetch/cancel.h"

namespace epochfs::prefetch {

using cachestore::FileId;
using cachestore::MutexLock;

Flights::Claim Flights::claim(FileId id) {
  MutexLock lock(mu_);
  auto [it, created] = flights_.try_emplace(id);
  Flight& f = it->second;
  if (!created && f.started) {
    return Claim::kInFlight;
  }
  // A prefetch taken over keeps its slot until its job leaves the queue (start_prefetch).
  f = Flight{false, true, next_gen_++, clock_()};
  return Claim::kOwned;
}

uint64_t Flights::begin_prefetch(FileId id) {
  MutexLock lock(mu_);
  const uint64_t gen = next_gen_;
  if (!flights_.try_emplace(id, Flight{true, false, gen, clock_()}).second) {
    return 0;
  }
  ++next_gen_;
  ++prefetches_;
  return gen;
}

bool Flights::start_prefetch(FileId id, uint64_t gen) {
  MutexLock lock(mu_);
  auto it = flights_.find(id);
  if (it == flights_.end() || it->second.gen != gen) {
    --prefetches_;  // taken over by a reader: the slot it kept is free now
    return false;
  }
  it->second.started = true;
  it->second.progress_ns = clock_();
  return true;
}

void Flights::end(FileId id, uint64_t gen) {
  MutexLock lock(mu_);
  auto it = flights_.find(id);
  if (it != flights_.end() && (gen == 0 || it->second.gen == gen)) {
    prefetches_ -= it->second.prefetch ? 1 : 0;
    flights_.erase(it);
  }
  done_for(id).notify_all();
}

void Flights::note_progress(FileId id) {
  MutexLock lock(mu_);
  auto it = flights_.find(id);
  if (it != flights_.end()) {
    it->second.progress_ns = clock_();
  }
}

Flights::Wait Flights::wait(FileId id, int64_t max_wait_ns, const Stuck& stuck,
                            uint64_t* stall_ns) {
  const int64_t start = clock_();
  Wait result = Wait::kNoFlight;
  {
    MutexLock lock(mu_);
    for (auto it = flights_.find(id); it != flights_.end(); it = flights_.find(id)) {
      const int64_t now = clock_();
      if (stuck(now - it->second.progress_ns)) {
        result = Wait::kStuck;
        break;
      }
      if (now - start >= max_wait_ns) {
        result = Wait::kTimedOut;
        break;
      }
      if (Cancel::current_cancelled()) {
        result = Wait::kCancelled;
        break;
      }
      result = Wait::kEnded;
      done_for(id).wait_for(poll_);
    }
  }
  *stall_ns += static_cast<uint64_t>(clock_() - start);
  return result;
}

unsigned Flights::prefetches() {
  MutexLock lock(mu_);
  return prefetches_;
}

bool Flights::has(FileId id) {
  MutexLock lock(mu_);
  return flights_.contains(id);
}

std::vector<bool> Flights::has_each(const std::vector<FileId>& ids) {
  std::vector<bool> found(ids.size());
  MutexLock lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    found[i] = flights_.contains(ids[i]);
  }
  return found;
}

}  // namespace epochfs::prefetch
