#include "prefetch/held_fds.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace epochfs::prefetch {

HeldFds::HeldFds(size_t held, std::function<void(cachestore::FileId)> release, int64_t max_age_ns)
    : held_(std::max<size_t>(1, held)), release_(std::move(release)), max_age_ns_(max_age_ns) {}

HeldFds::~HeldFds() {
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  by_id_.clear();
  dropped.swap(lru_);
}

std::shared_ptr<const HeldFds::Held> HeldFds::find(
    cachestore::FileId id, const std::optional<cachestore::FileVersion>& version, int64_t now_ns) {
  Lru dropped;  // let go of (and released) once the lock is released: declared before it
  cachestore::MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return nullptr;
  }
  const Held& held = **it->second;
  const bool stale = version && !(held.version == *version);  // the source changed
  const bool old = max_age_ns_ > 0 && now_ns - held.opened_ns > max_age_ns_;
  if (stale || old) {
    dropped.splice(dropped.begin(), lru_, it->second);
    by_id_.erase(it);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return lru_.front();
}

std::shared_ptr<const HeldFds::Held> HeldFds::hold(Held held) {
  const cachestore::FileId id = held.id;
  // The last owner releases: the set, or a user still reading when the set let go.
  auto shared =
      std::shared_ptr<const Held>(new Held(std::move(held)), [release = release_](const Held* h) {
        if (release) {
          release(h->id);
        }
        delete h;
      });
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    dropped.splice(dropped.begin(), lru_, it->second);  // two users opened it: keep the newer
    by_id_.erase(it);
  }
  lru_.push_front(shared);
  by_id_[id] = lru_.begin();
  while (lru_.size() > held_) {
    by_id_.erase(lru_.back()->id);
    dropped.splice(dropped.begin(), lru_, std::prev(lru_.end()));
  }
  return shared;
}

void HeldFds::forget(cachestore::FileId id) {
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    dropped.splice(dropped.begin(), lru_, it->second);
    by_id_.erase(it);
  }
}

}  // namespace epochfs::prefetch
