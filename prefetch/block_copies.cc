#include "prefetch/block_copies.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace epochfs::prefetch {

BlockCopies::BlockCopies(size_t held, std::function<void(cachestore::FileId)> unpin,
                         std::function<void(const Copy&)> read_ahead)
    : held_(std::max<size_t>(1, held)),
      unpin_(std::move(unpin)),
      read_ahead_(std::move(read_ahead)) {}

BlockCopies::~BlockCopies() {
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  by_id_.clear();
  dropped.swap(lru_);
}

std::shared_ptr<const BlockCopies::Copy> BlockCopies::find(cachestore::FileId id,
                                                           const cachestore::FileVersion& version,
                                                           int64_t now_ns) {
  Lru dropped;  // let go of (and unpinned) once the lock is released: declared before it
  std::shared_ptr<const Copy> found;
  bool due = false;
  {
    cachestore::MutexLock lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      return nullptr;
    }
    if (!(it->second->copy->version == version)) {
      dropped.splice(dropped.begin(), lru_, it->second);  // the source changed: stale
      by_id_.erase(it);
      return nullptr;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    Held& held = lru_.front();
    due = now_ns - held.read_ahead_ns >= kReadAheadNs;
    if (due) {
      held.read_ahead_ns = now_ns;
    }
    found = held.copy;
  }
  if (due) {
    read_ahead_(*found);
  }
  return found;
}

std::shared_ptr<const BlockCopies::Copy> BlockCopies::hold(Copy copy, int64_t now_ns) {
  const cachestore::FileId id = copy.id;
  // The last owner unpins: the set, or a reader still reading when the set let go.
  auto held =
      std::shared_ptr<const Copy>(new Copy(std::move(copy)), [unpin = unpin_](const Copy* c) {
        unpin(c->id);
        delete c;
      });
  read_ahead_(*held);
  Lru dropped;
  cachestore::MutexLock lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    dropped.splice(dropped.begin(), lru_, it->second);  // two readers opened it: keep the newer
    by_id_.erase(it);
  }
  lru_.push_front(Held{held, now_ns});
  by_id_[id] = lru_.begin();
  while (lru_.size() > held_) {
    by_id_.erase(lru_.back().copy->id);
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
