#include "cachestore/eviction_policy.h"

#include <algorithm>

namespace epochfs::cachestore {

void LruPolicy::touch(FileId id) {
  if (head_ == id) {
    return;
  }
  if (contains(id)) {
    unlink(id);
  } else {
    if (id >= links_.size()) {
      links_.resize(std::max<size_t>(id + 1, links_.size() + links_.size() / 2));
    }
    ++size_;
  }
  Link& l = links_[id];
  l.older = head_;
  if (head_ != kNone) {
    links_[head_].newer = id;
  } else {
    tail_ = id;
  }
  head_ = id;
}

void LruPolicy::unlink(FileId id) {
  Link& l = links_[id];
  (l.newer != kNone ? links_[l.newer].older : head_) = l.older;
  (l.older != kNone ? links_[l.older].newer : tail_) = l.newer;
  l = Link{};
}

void LruPolicy::removed(FileId id) {
  if (contains(id)) {
    unlink(id);
    --size_;
  }
}

std::optional<FileId> LruPolicy::choose_victim(const std::function<bool(FileId)>& can_evict) {
  for (FileId id = tail_; id != kNone; id = links_[id].newer) {
    if (can_evict(id)) {
      return id;
    }
  }
  return std::nullopt;
}

// Files whose key was computed as kNever live in never_ (LRU order); the others in the heap.
void NextUsePolicy::file_key(FileId id) {
  const uint32_t stamp = next_stamp_++;
  if (next_stamp_ == 0) {
    next_stamp_ = 1;  // 0 means not resident
  }
  if (id >= stamps_.size()) {
    stamps_.resize(std::max<size_t>(id + 1, stamps_.size() + stamps_.size() / 2));
  }
  resident_ += stamps_[id] == 0 ? 1 : 0;
  stamps_[id] = stamp;
  const uint64_t key = oracle_.next_use(id);
  if (key == NextUseOracle::kNever) {
    never_.inserted(id);  // also refreshes its recency
    return;
  }
  never_.removed(id);
  push(Keyed{key, id, stamp});
  if (heap_.size() > 2 * resident_ + 1024) {
    rebuild_heap();
  }
}

// Drops stale entries: each access pushes a new one.
void NextUsePolicy::rebuild_heap() {
  std::erase_if(heap_, [this](const Keyed& k) { return stamp_of(k.id) != k.stamp; });
  std::make_heap(heap_.begin(), heap_.end());
}

void NextUsePolicy::removed(FileId id) {
  if (stamp_of(id) != 0) {
    stamps_[id] = 0;
    --resident_;
  }
  never_.removed(id);
}

std::optional<FileId> NextUsePolicy::choose_victim(const std::function<bool(FileId)>& can_evict) {
  // Files with no known next use go first. One that gained a future (a new order) moves to
  // the heap; the next call looks again.
  std::vector<FileId> gained_future;
  std::optional<FileId> victim = never_.choose_victim([&](FileId id) {
    if (oracle_.next_use(id) != NextUseOracle::kNever) {
      gained_future.push_back(id);
      return false;
    }
    return can_evict(id);
  });
  for (FileId id : gained_future) {
    file_key(id);
  }
  if (victim) {
    return victim;
  }
  std::vector<Keyed> refused;  // pinned: put back afterwards
  while (!heap_.empty() && !victim) {
    const Keyed top = pop();
    if (stamp_of(top.id) != top.stamp) {
      continue;  // stale
    }
    const uint64_t key = oracle_.next_use(top.id);
    if (key == NextUseOracle::kNever) {
      file_key(top.id);  // now first in line for eviction
      if (can_evict(top.id)) {
        victim = top.id;
      }
      continue;
    }
    if (key < top.key) {
      push(Keyed{key, top.id, top.stamp});  // needed sooner than thought: re-rank
      continue;
    }
    if (can_evict(top.id)) {
      victim = top.id;
    }
    refused.push_back(Keyed{key, top.id, top.stamp});  // stays until removed() says otherwise
  }
  for (const Keyed& k : refused) {
    push(k);
  }
  return victim;
}

bool NextUsePolicy::worth_evicting(FileId incoming, FileId victim) {
  const uint64_t in = oracle_.next_use(incoming);
  const uint64_t out = oracle_.next_use(victim);
  // Two files with no known future: LRU replaces the older one.
  return in < out || (in == NextUseOracle::kNever && out == NextUseOracle::kNever);
}

}  // namespace epochfs::cachestore
