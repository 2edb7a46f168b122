// Planner, continued: which ids of paths only orders named no order holds any more, so that
// the engine can release them (Engine::reclaim_paths). A job holds the ids its uploads
// registered until it ends; schedules hold their entries (next_use) and manifests theirs
// (manifest_refs_).
#include <algorithm>

#include "prefetch/planner.h"

namespace epochfs::prefetch {

using cachestore::MutexLock;

void Planner::hold_registered(const Publisher& publisher, const OrderHeader& header,
                              std::vector<FileId> ids) {
  if (ids.empty()) {
    return;
  }
  MutexLock lock(mu_);
  if (Job* job = jobs_.find(publisher, header.job)) {
    if (!job->permanent) {  // the mount's own job never ends
      job->registered.insert(job->registered.end(), ids.begin(), ids.end());
    }
    return;
  }
  for (FileId id : ids) {
    candidates_.push_back(Registered{id, publisher.uid});
  }
}

std::vector<Planner::Registered> Planner::take_candidates(size_t max) {
  MutexLock lock(mu_);
  const size_t n = std::min(max, candidates_.size());
  std::vector<Registered> taken(candidates_.end() - static_cast<ptrdiff_t>(n), candidates_.end());
  candidates_.resize(candidates_.size() - n);
  return taken;
}

void Planner::release_unheld(const std::vector<Registered>& candidates, const Release& release,
                             std::vector<std::pair<Registered, std::optional<size_t>>>* done) {
  MutexLock lock(mu_);
  for (const Registered& c : candidates) {
    if (holds_locked(c.id)) {
      candidates_.push_front(c);  // as return_candidates does
    } else {
      done->emplace_back(c, release(c.id));
    }
  }
}

void Planner::return_candidates(const std::vector<Registered>& candidates) {
  // At the front, where take_candidates looks last: a batch a copy or a live order holds is
  // not looked at again before every other candidate has been.
  MutexLock lock(mu_);
  for (const Registered& c : candidates) {
    candidates_.push_front(c);
  }
}

bool Planner::order_holds(FileId id) {
  MutexLock lock(mu_);
  return holds_locked(id);
}

std::vector<bool> Planner::orders_hold(const std::vector<FileId>& ids) {
  std::vector<bool> held(ids.size());
  MutexLock lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    held[i] = holds_locked(ids[i]);
  }
  return held;
}

bool Planner::holds_locked(FileId id) {
  return schedule_.next_use(id) != kNever || (id < manifest_refs_.size() && manifest_refs_[id] > 0);
}

void Planner::count_manifest(const std::vector<FileId>& manifest, int delta) {
  // A run of one id counts once: a manifest of ranges names a block once per sample in it,
  // in file order, and would otherwise saturate its count (held for good) at once.
  FileId last = kNoFile;
  for (FileId id : manifest) {
    if (id == kNoFile || id == last) {
      continue;
    }
    last = id;
    if (id >= manifest_refs_.size()) {
      manifest_refs_.resize(size_t{id} + 1, 0);
    }
    uint16_t& refs = manifest_refs_[id];
    if (refs != UINT16_MAX) {  // saturated: held for good
      refs = static_cast<uint16_t>(refs + delta);
    }
  }
}

}  // namespace epochfs::prefetch
