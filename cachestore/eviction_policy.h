// EvictionPolicy: which cached file to drop when room is needed, and which to admit.
//
// Policies are plain classes: no I/O and no locks. The CacheStore owns one, calls it under its
// own lock, and feeds it every event (a file became resident, was hit, was removed). Tests feed
// them traces directly. (RocksDB cache/lru_cache.h: "This class is not thread-safe".)
#pragma once

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

  // Whether id is in the list (resident, for this policy).
  bool contains(FileId id) const {
    return id < links_.size() && (links_[id].newer != kNone || head_ == id);
  }

 private:
  static constexpr FileId kNone = UINT32_MAX;

  // A resident file's neighbours in recency order. Ids are dense, so a list threaded through
  // a vector by id costs 8 bytes per id; a std::list and a hash map of iterators cost ~100
  // per resident file (docs/benchmarks.md, "An ImageNet-sized tree").
  struct Link {
    FileId newer = kNone;
    FileId older = kNone;
  };

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

  // Whether id is needed more than once in one epoch still to come (a range order's block).
  virtual bool repeats(FileId /*id*/) { return false; }

  // Whether id is a range order's block with no use known past its stream's current epoch.
  virtual bool this_epoch_only(FileId /*id*/) { return false; }
};

// Known-future eviction (Belady's MIN, with bypass): evicts the file needed farthest in the
// future, files with no known next use first (least recently used among them), and refuses to
// cache a file needed later than the file it would displace. Without published orders every
// file is kNever, and this is exactly LRU.
//
// A file that repeats (oracle: a block read many times an epoch) displaces only a file with no
// known future: its uses and the victim's are spread through the epoch alike, so the swap would
// save no read and cost the victim's again (the page cache serves an uncached block's later
// reads). Source reads then meet the bound (docs/benchmarks.md, "Single-file datasets").
//
// Next-use values change as the trainer moves on, so the heap's keys are refreshed lazily: the
// top is re-asked from the oracle before it is chosen and sinks if it moved closer. A file
// consumed by a reader is re-keyed through accessed().
class NextUsePolicy final : public EvictionPolicy {
 public:
  explicit NextUsePolicy(NextUseOracle& oracle) : oracle_(oracle) {}

  void inserted(FileId id) override { file_key(id); }

  void accessed(FileId id) override {
    if (in_heap(id) || never_.contains(id)) {
      file_key(id);
    }
  }

  void removed(FileId id) override;
  std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) override;
  bool worth_evicting(FileId incoming, FileId victim) override;

  size_t size() const override { return heap_.size() + never_.size(); }

  // Entries in the heap: one per resident file whose next use was known at its last keying
  // (one whose future has since gone leaves the heap when it reaches the top), never more.
  size_t heap_entries() const { return heap_.size(); }

 private:
  // Packed: 12 bytes, not 16, for each of millions of copies.
  struct __attribute__((packed)) Keyed {
    uint64_t key;
    FileId id;
  };

  static constexpr uint32_t kNotHeld = UINT32_MAX;

  void file_key(FileId id);
  void place(FileId id, uint64_t key);
  void take_out(FileId id);
  void sift_up(size_t at);
  void sift_down(size_t at);

  void put(size_t at, const Keyed& k) {
    heap_[at] = k;
    slots_[k.id] = static_cast<uint32_t>(at);
  }

  bool in_heap(FileId id) const { return id < slots_.size() && slots_[id] != kNotHeld; }

  NextUseOracle& oracle_;

  // Files with a known next use: a max-heap by key whose entries are re-keyed in place, so an
  // access costs one sift and the heap never holds stale entries to be swept (a sweep of 28 M
  // entries held the cache's lock 553 ms at 14 M copies). slots_ is each id's position in it,
  // 4 bytes per id as ids are dense.
  std::vector<Keyed> heap_;
  std::vector<uint32_t> slots_;
  LruPolicy never_;  // files with no known next use
};

}  // namespace epochfs::cachestore
