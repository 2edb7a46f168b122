#include "prefetch/block_copies.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace epochfs::prefetch {

BlockCopies::BlockCopies(size_t held, std::function<void(cachestore::FileId)> unpin)
    : held_(std::max<size_t>(1, held)), unpin_(std::move(unpin)) {}

BlockCopies::~BlockCopies() {
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  by_id_.clear();
  dropped.swap(lru_);
}

std::shared_ptr<const BlockCopies::Copy> BlockCopies::find(cachestore::FileId id,
                                                           const cachestore::FileVersion& version) {
  Lru dropped;  // let go of (and unpinned) once the lock is released: declared before it
  cachestore::MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return nullptr;
  }
  if (!((*it->second)->version == version)) {
    dropped.splice(dropped.begin(), lru_, it->second);  // the source changed: stale
    by_id_.erase(it);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return lru_.front();
}

std::shared_ptr<const BlockCopies::Copy> BlockCopies::hold(Copy copy) {
  const cachestore::FileId id = copy.id;
  // The last owner unpins: the set, or a reader still reading when the set let go.
  auto held =
      std::shared_ptr<const Copy>(new Copy(std::move(copy)), [unpin = unpin_](const Copy* c) {
        unpin(c->id);
        delete c;
      });
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    dropped.splice(dropped.begin(), lru_, it->second);  // two readers opened it: keep the newer
    by_id_.erase(it);
  }
  lru_.push_front(held);
  by_id_[id] = lru_.begin();
  while (lru_.size() > held_) {
    by_id_.erase(lru_.back()->id);
    dropped.splice(dropped.begin(), lru_, std::prev(lru_.end()));
  }
  return held;
}

void BlockCopies::forget(cachestore::FileId id) {
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    dropped.splice(dropped.begin(), lru_, it->second);
    by_id_.erase(it);
  }
}

}  // namespace epochfs::prefetch
