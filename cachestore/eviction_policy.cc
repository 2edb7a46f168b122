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
  const uint64_t key = oracle_.next_use(id);
  if (key == NextUseOracle::kNever) {
    take_out(id);
    never_.inserted(id);  // also refreshes its recency
    return;
  }
  never_.removed(id);
  place(id, key);
}

void NextUsePolicy::place(FileId id, uint64_t key) {
  if (id >= slots_.size()) {
    slots_.resize(std::max<size_t>(id + 1, slots_.size() + slots_.size() / 2), kNotHeld);
  }
  if (!in_heap(id)) {
    heap_.push_back(Keyed{key, id});
    slots_[id] = static_cast<uint32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
    return;
  }
  const size_t at = slots_[id];
  const uint64_t was = heap_[at].key;
  heap_[at].key = key;
  if (key > was) {
    sift_up(at);
  } else {
    sift_down(at);
  }
}

void NextUsePolicy::take_out(FileId id) {
  if (!in_heap(id)) {
    return;
  }
  const size_t at = slots_[id];
  slots_[id] = kNotHeld;
  const Keyed last = heap_.back();
  heap_.pop_back();
  if (at == heap_.size()) {
    return;  // it was the last entry
  }
  put(at, last);
  sift_up(at);
  sift_down(slots_[last.id]);
}

void NextUsePolicy::sift_up(size_t at) {
  const Keyed k = heap_[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (heap_[parent].key >= k.key) {
      break;
    }
    put(at, heap_[parent]);
    at = parent;
  }
  put(at, k);
}

void NextUsePolicy::sift_down(size_t at) {
  const Keyed k = heap_[at];
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= n) {
      break;
    }
    if (child + 1 < n && heap_[child + 1].key > heap_[child].key) {
      ++child;
    }
    if (heap_[child].key <= k.key) {
      break;
    }
    put(at, heap_[child]);
    at = child;
  }
  put(at, k);
}

void NextUsePolicy::removed(FileId id) {
  take_out(id);
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
  std::vector<Keyed> set_aside;  // looked at (pinned, or the victim): put back afterwards
  while (!heap_.empty() && !victim) {
    const Keyed top = heap_.front();
    const uint64_t key = oracle_.next_use(top.id);
    if (key == NextUseOracle::kNever) {
      file_key(top.id);  // now first in line for eviction
      if (can_evict(top.id)) {
        victim = top.id;
      }
      continue;
    }
    if (key < top.key) {
      place(top.id, key);  // needed sooner than thought: re-rank
      continue;
    }
    take_out(top.id);
    if (can_evict(top.id)) {
      victim = top.id;
    }
    set_aside.push_back(Keyed{key, top.id});  // stays until removed() says otherwise
  }
  for (const Keyed& k : set_aside) {
    place(k.id, k.key);
  }
  return victim;
}

bool NextUsePolicy::worth_evicting(FileId incoming, FileId victim) {
  const uint64_t in = oracle_.next_use(incoming);
  const uint64_t out = oracle_.next_use(victim);
  if (oracle_.this_epoch_only(incoming)) {
    return false;  // the page cache serves the rest of its epoch; the copy would save nothing
  }
  if (out != NextUseOracle::kNever && oracle_.repeats(incoming)) {
    return false;
  }
  // Two files with no known future: LRU replaces the older one.
  return in < out || (in == NextUseOracle::kNever && out == NextUseOracle::kNever);
}

}  // namespace epochfs::cachestore
