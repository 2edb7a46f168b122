// Engine, continued: forgetting the paths that only ended jobs' orders named. The registry
// would otherwise keep every path any order ever named, and one user's orders of new paths
// would hold the daemon's memory, and their path charge, for the mount's life.
//
// Two steps, on the planning thread between passes, so that no pass holds an id it picked:
//  1. Release. A candidate (an id an ended job's upload registered: Planner::take_candidates)
//     that no copy in flight or in the cache, no live order or manifest holds, and that
//     nothing else has used (FileRegistry::order_id_of: a lookup, an open, the cache pin it)
//     leaves the registry; its path's bytes go back to the user who registered it. A pinned
//     one stays, as any path the kernel used does, and its whole charge goes back.
//  2. Recycle. Once every operation under way at the release has ended (prefetch/grace.h),
//     and still nothing holds it, the id may name another path: what is kept per id goes,
//     and the rest of the charge (FileRegistry::kBytesPerPath) goes back.
#include <unordered_map>

#include "prefetch/engine.h"

namespace epochfs::prefetch {

namespace {

// Candidates are looked at kReclaimBatch at a time (the planner's lock, which opens take, is
// held for one batch: a few hundred microseconds), up to kReclaimBatches batches a round while
// they are being released; rounds are kReclaimInterval apart, since candidates a cached copy
// or another live order holds are looked at again and again. About 2.6 M paths a second at
// most: a user who publishes order after order of new paths, each job ending at once, is kept
// up with.
constexpr size_t kReclaimBatch = 1024;
constexpr int kReclaimBatches = 256;
constexpr int64_t kReclaimIntervalNs = 100'000'000;

}  // namespace

void Engine::reclaim() {
  const int64_t now = cachestore::now_ns();
  if (now - last_reclaim_ns_ < kReclaimIntervalNs) {
    return;
  }
  last_reclaim_ns_ = now;
  for (int i = 0; i < kReclaimBatches && release_candidates() > 0; ++i) {
    recycle_released();
  }
  recycle_released();
}

std::vector<bool> Engine::copies_hold(const std::vector<FileId>& ids) {
  // A copy can start from a pinned open, a planning pass (neither while this runs) or a READ
  // of a block (CacheStore::keep_names).
  std::vector<bool> held = flights_.has_each(ids);
  if (cache_) {
    const std::vector<bool> cached = cache_->contains_each(ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      held[i] = held[i] || cached[i];
    }
  }
  return held;
}

void Engine::charge_reclaim(const std::vector<uid_t>& uids, int64_t cpu_ns) {
  // Forgetting a user's paths is work their orders made: the batch's CPU time is spent from
  // their publishing share (publish_cpu_), split by how many of the batch were theirs.
  if (uids.empty()) {
    return;
  }
  std::unordered_map<uid_t, size_t> of_user;
  for (uid_t uid : uids) {
    ++of_user[uid];
  }
  const int64_t now = cachestore::now_ns();
  for (const auto& [uid, n] : of_user) {
    publish_cpu_.spend(uid, static_cast<double>(cpu_ns) * n / uids.size() / 1e6, now);
  }
}

size_t Engine::release_candidates() {
  const int64_t start_cpu = cachestore::thread_cpu_ns();
  const auto batch = planner_->take_candidates(kReclaimBatch);
  std::vector<FileId> ids;
  std::vector<uid_t> uids;  // whose the work is (charge_reclaim)
  for (const auto& c : batch) {
    ids.push_back(c.id);
    uids.push_back(c.uid);
  }
  const std::vector<bool> held = copies_hold(ids);
  std::vector<Planner::Registered> free_of_copies;
  std::vector<Planner::Registered> copied;
  for (size_t i = 0; i < batch.size(); ++i) {
    (held[i] ? copied : free_of_copies).push_back(batch[i]);
  }
  planner_->return_candidates(copied);
  std::vector<std::pair<Planner::Registered, std::optional<size_t>>> done;
  cachestore::CacheStore::NamedIds released;
  planner_->release_unheld(
      free_of_copies,
      [&](FileId id) {
        std::string path = registry_.path_of(id);
        auto length = registry_.release_unpinned(id);
        if (length) {
          released.emplace_back(id, std::move(path));
        }
        return length;
      },
      &done);
  if (cache_) {
    cache_->keep_names(released);  // for copies that raced the release
  }
  const uint64_t epoch = grace_.epoch();
  for (const auto& [c, length] : done) {
    if (!length) {
      // Pinned: part of the mount's paths now. Its length is read while it is still there.
      paths_.release(c.uid, registry_.path_of(c.id).size() + FileRegistry::kBytesPerPath);
      continue;
    }
    paths_.release(c.uid, *length);
    released_.push_back(Released{c.id, c.uid, epoch});
    paths_released_.fetch_add(1, std::memory_order_relaxed);
  }
  charge_reclaim(uids, cachestore::thread_cpu_ns() - start_cpu);
  return done.size();
}

void Engine::recycle_released() {
  const int64_t start_cpu = cachestore::thread_cpu_ns();
  const uint64_t now = grace_.advance();
  std::vector<Released> due;
  while (due.size() < kReclaimBatch && !released_.empty() && released_.front().epoch + 2 <= now) {
    due.push_back(released_.front());  // in release order: the rest are younger still
    released_.pop_front();
  }
  std::vector<FileId> ids;
  std::vector<uid_t> uids;
  for (const Released& r : due) {
    ids.push_back(r.id);
    uids.push_back(r.uid);
  }
  // An upload that found the path before its release may have published it since: the id
  // waits for that order to end.
  const std::vector<bool> ordered = planner_->orders_hold(ids);
  const std::vector<bool> copied = copies_hold(ids);
  for (size_t i = 0; i < due.size(); ++i) {
    const Released& r = due[i];
    if (ordered[i] || copied[i]) {
      released_.push_back(Released{r.id, r.uid, now});
      continue;
    }
    fresh_.forget(r.id);
    rights_checked_.forget(r.id);
    registry_.recycle(r.id);
    paths_.release(r.uid, FileRegistry::kBytesPerPath);
  }
  charge_reclaim(uids, cachestore::thread_cpu_ns() - start_cpu);
}

}  // namespace epochfs::prefetch
