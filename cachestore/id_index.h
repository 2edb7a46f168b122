// IdIndex: 32-bit ids found by their key's hash, in an open-addressing table that holds no key.
//
// The owner keeps each id's key (a path in an arena, an inode's device and number) and answers,
// for an id the probe meets, whether its key is the one sought. A slot is the id and the low 32
// bits of its key's hash (8 bytes; linear probing, at most 70% full), so a probe compares a key
// only where 32 bits match, and deletion (backward shift) and growth read no key at all. A
// node-based map would hold a copy of the key and a pointer per entry: 40 bytes or more.
//
// Users: the path registry (prefetch/file_registry.h), the inode table (fusefs/inode_table.h).
// Not thread-safe: its owner locks it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace epochfs::cachestore {

class IdIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;  // no id; never a valid one

  // The id among those filed under hash for which same(id) is true, or kNone.
  template <class Same>
  uint32_t find(uint64_t hash, const Same& same) const {
    if (slots_.empty()) {
      return kNone;
    }
    const size_t mask = slots_.size() - 1;
    const uint32_t bits = static_cast<uint32_t>(hash);
    for (size_t at = hash & mask;; at = (at + 1) & mask) {
      const Slot s = slots_[at];
      if (s.id == kNone || (s.bits == bits && same(s.id))) {
        return s.id;
      }
    }
  }

  // Grows now if one more id would pass 70% full, so that the next insert cannot throw.
  // Returns how many ids the growth moved (0 mostly): the owner's lock is held that long.
  size_t make_room() {
    if (10 * (used_ + 1) <= 7 * slots_.size()) {
      return 0;
    }
    const size_t moved = used_;
    rebuild(std::max(kFirstSlots, 2 * slots_.size()));
    return moved;
  }

  // Files id under hash; id's key must not be filed already.
  void insert(uint32_t id, uint64_t hash) {
    make_room();
    place(Slot{id, static_cast<uint32_t>(hash)});
    ++used_;
  }

  // Removes id, filed under hash; false if it is not there.
  bool erase(uint32_t id, uint64_t hash) {
    if (slots_.empty()) {
      return false;
    }
    const size_t mask = slots_.size() - 1;
    size_t hole = hash & mask;
    while (slots_[hole].id != id) {
      if (slots_[hole].id == kNone) {
        return false;
      }
      hole = (hole + 1) & mask;
    }
    for (size_t j = (hole + 1) & mask; slots_[j].id != kNone; j = (j + 1) & mask) {
      const size_t home = slots_[j].bits & mask;
      // The entry at j may fill the hole if its probe passed the hole: its home is not in
      // (hole, j], cyclically.
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --used_;
    return true;
  }

  size_t size() const { return used_; }

  // Rebuilt at the smallest size its ids fit in: after most were erased.
  void shrink() {
    size_t want = kFirstSlots;
    while (10 * used_ > 7 * want) {
      want *= 2;
    }
    if (want < slots_.size()) {
      rebuild(want);
    }
  }

  // The table's memory, for tests of shrink().
  size_t bytes() const { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    uint32_t id = kNone;
    uint32_t bits = 0;  // the low 32 bits of the id's key's hash
  };

  static constexpr size_t kFirstSlots = 64;

  // Every id filed is distinct: the first free slot from its home is its place.
  void place(Slot s) {
    const size_t mask = slots_.size() - 1;
    size_t at = s.bits & mask;
    while (slots_[at].id != kNone) {
      at = (at + 1) & mask;
    }
    slots_[at] = s;
  }

  void rebuild(size_t size) {
    std::vector<Slot> old(size);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.id != kNone) {
        place(s);
      }
    }
  }

  std::vector<Slot> slots_;
  size_t used_ = 0;
};

}  // namespace epochfs::cachestore
