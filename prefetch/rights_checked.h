// RightsChecked: whose right to read a file was last confirmed, so that an order naming
// files already cached is checked once per file and set of rights, not once per epoch.
//
// Owner: the Engine. A cached file needs no copy, but an order naming it still gains from it
// (its counters, its files kept in the cache by their next use): so it is checked with the
// publisher's rights as a copy would be (prefetch/credentials.h). A user whose right was
// confirmed is remembered here; a user whose right is revoked later is refused again once a
// newer check takes the slot (reads through the mount are the kernel's to allow, always).
//
// A set of rights is a Credentials::fingerprint (user, group and supplementary groups): the same
// user in another group (newgrp, sg) is checked anew. Two sets sharing a fingerprint (a 32-bit
// hash) could skip one check of a cached file: its order would keep its counters and next use,
// and have a block's copy read into memory, never read it (reads through the mount are the
// kernel's to allow).
//
// Bounded: a direct-mapped table of a fixed number of slots, indexed by file id, each one
// atomic word (file id and fingerprint): a file whose slot another took is checked again.
//
// Thread-safety: all methods may be called from any thread; no lock.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "cachestore/file_id.h"

namespace epochfs::prefetch {

class RightsChecked {
 public:
  static constexpr size_t kDefaultSlots = size_t{1} << 20;  // 8 MiB: an ImageNet-1k order

  explicit RightsChecked(size_t slots = kDefaultSlots)
      : slots_(slots), table_(std::make_unique<std::atomic<uint64_t>[]>(slots)) {}

  // Whether the right of the rights fingerprinted `who` to read id was confirmed (and not
  // forgotten since). who: Credentials::fingerprint, never 0.
  bool confirmed(cachestore::FileId id, uint32_t who) const {
    return table_[id % slots_].load(std::memory_order_relaxed) == key(id, who);
  }

  void confirm(cachestore::FileId id, uint32_t who) {
    table_[id % slots_].store(key(id, who), std::memory_order_relaxed);
  }

  // Forgets every right confirmed for id: its id is about to name another path.
  void forget(cachestore::FileId id) {
    std::atomic<uint64_t>& slot = table_[id % slots_];
    uint64_t held = slot.load(std::memory_order_relaxed);
    if ((held >> 32) == id) {
      slot.compare_exchange_strong(held, 0, std::memory_order_relaxed);
    }
  }

 private:
  // Never 0 (an empty slot): who is never 0.
  static uint64_t key(cachestore::FileId id, uint32_t who) { return (uint64_t{id} << 32) | who; }

  const size_t slots_;
  std::unique_ptr<std::atomic<uint64_t>[]> table_;
};

}  // namespace epochfs::prefetch
