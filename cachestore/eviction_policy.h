// EvictionPolicy: which cached file to drop when room is needed, and which to admit.
//
// Policies are plain classes: no I/O and no locks. The CacheStore owns one, calls it under its
// own lock, and feeds it every event (a file became resident, was hit, was removed). Tests feed
// them traces directly. (RocksDB cache/lru_cache.h: "This class is not thread-safe".)
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cachestore/file_id.h"

namespace epochfs::cachestore {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // id became resident (its copy is ready).
  virtual void inserted(FileId id) = 0;
  // A reader hit id.
  virtual void accessed(FileId id) = 0;
  // id left the cache (evicted, dropped as stale or damaged).
  virtual void removed(FileId id) = 0;

  // The resident file to evict next among those can_evict accepts (pinned files are refused),
  // or nullopt if there is none.
  virtual std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) = 0;

  // Whether a file not yet cached is worth evicting `victim` (the policy's choice) for. When
  // it is not, the file is not cached at all (bypass).
  virtual bool worth_evicting(FileId /*incoming*/, FileId /*victim*/) { return true; }

  // Number of resident files the policy tracks.
  virtual size_t size() const = 0;
};

// Least recently used: evicts the file whose last insert or hit is oldest. What cachefilesd
// and rclone's VFS cache do; the baseline for the known-future policy.
class LruPolicy final : public EvictionPolicy {
 public:
  void inserted(FileId id) override { touch(id); }

  void accessed(FileId id) override {
    if (contains(id)) {
      touch(id);
    }
  }

  void removed(FileId id) override;
  std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) override;

  size_t size() const override { return size_; }

 private:
  static constexpr FileId kNone = UINT32_MAX;

  // A resident file's neighbours in recency order. Ids are dense, so a list threaded through
  // a vector by id costs 8 bytes per id; a std::list and a hash map of iterators cost ~100
  // per resident file (docs/benchmarks.md, "An ImageNet-sized tree").
  struct Link {
    FileId newer = kNone;
    FileId older = kNone;
  };

  bool contains(FileId id) const {
    return id < links_.size() && (links_[id].newer != kNone || head_ == id);
  }

  void touch(FileId id);
  void unlink(FileId id);

  std::vector<Link> links_;  // by id
  FileId head_ = kNone;      // most recent
  FileId tail_ = kNone;      // least recent
  size_t size_ = 0;
};

// When each file will be needed next, as the prefetch engine knows from published orders.
// Implemented above this module; called with the CacheStore's lock held, so an implementation
// may take only leaf locks of its own and must never call into the CacheStore.
class NextUseOracle {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;

  virtual ~NextUseOracle() = default;

  // A value that grows with how far in the future id is needed next (comparable between
  // files, stable while nothing about id changes); kNever if no use is known.
  virtual uint64_t next_use(FileId id) = 0;
};

// Known-future eviction (Belady's MIN, with bypass): evicts the file needed farthest in the
// future, files with no known next use first (least recently used among them), and refuses to
// cache a file needed later than the file it would displace. Without published orders every
// file is kNever, and this is exactly LRU.
//
// Next-use values change as the trainer moves on, so they are kept in a max-heap with lazily
// refreshed keys: a popped entry is re-asked from the oracle and pushed back if it moved closer.
// A file consumed by a reader is re-keyed through accessed().
class NextUsePolicy final : public EvictionPolicy {
 public:
  explicit NextUsePolicy(NextUseOracle& oracle) : oracle_(oracle) {}

  void inserted(FileId id) override { file_key(id); }

  void accessed(FileId id) override {
    if (stamp_of(id) != 0) {
      file_key(id);
    }
  }

  void removed(FileId id) override;
  std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) override;
  bool worth_evicting(FileId incoming, FileId victim) override;

  size_t size() const override { return resident_; }

 private:
  struct Keyed {
    uint64_t key;
    FileId id;
    uint32_t stamp;

    bool operator<(const Keyed& o) const { return key < o.key; }
  };

  void file_key(FileId id);
  void rebuild_heap();

  NextUseOracle& oracle_;

  uint32_t stamp_of(FileId id) const { return id < stamps_.size() ? stamps_[id] : 0; }

  // By id: a resident file's current stamp (0: not resident); heap entries with another stamp
  // are stale. A vector by id, as ids are dense: 4 bytes per id.
  std::vector<uint32_t> stamps_;
  size_t resident_ = 0;
  uint32_t next_stamp_ = 1;

  void push(const Keyed& k) {
    heap_.push_back(k);
    std::push_heap(heap_.begin(), heap_.end());
  }

  Keyed pop() {
    std::pop_heap(heap_.begin(), heap_.end());
    const Keyed k = heap_.back();
    heap_.pop_back();
    return k;
  }

  // Files with a known next use: a max-heap kept with std::push_heap and pop_heap, not a
  // std::priority_queue, so that stale entries are dropped in place and the heap remade in
  // linear time (popping 2.5 million entries one by one held the cache's lock 620 ms).
  std::vector<Keyed> heap_;
  LruPolicy never_;  // files with no known next use
};

}  // namespace epochfs::cachestore
