// IdIndex: 32-bit ids found by their key's hash, in an open-addressing table that holds no key.
//
// The owner keeps each id's key (a path in an arena, an inode's device and number) and answers,
// for an id the probe meets, whether its key is the one sought. A slot is the id and the low 32
// bits of its key's hash (8 bytes; linear probing, at most 70% full), so a probe compares a key
// only where 32 bits match, and deletion (backward shift) and growth read no key at all. A
// node-based map would hold a copy of the key and a pointer per entry: 40 bytes or more.
//
// The table grows by half, not by doubling: 47-70% full, 11-17 bytes per id (doubling: 35-70%,
// 11-23 bytes; 19 at 14 million paths). A slot's home is the hash's bits scaled to the table's
// size (multiply-shift), which any size allows.
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
    const auto bits = static_cast<uint32_t>(hash);
    for (size_t at = home(bits);; at = next(at)) {
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
    rebuild(std::max(kFirstSlots, grown(slots_.size())));
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
    size_t hole = home(static_cast<uint32_t>(hash));
    while (slots_[hole].id != id) {
      if (slots_[hole].id == kNone) {
        return false;
      }
      hole = next(hole);
    }
    for (size_t j = next(hole); slots_[j].id != kNone; j = next(j)) {
      // The entry at j may fill the hole if its probe passed the hole: its home is not in
      // (hole, j], cyclically.
      if (distance(home(slots_[j].bits), j) >= distance(hole, j)) {
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
      want = grown(want);
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

  static size_t grown(size_t slots) { return slots + slots / 2; }

  size_t home(uint32_t bits) const {
    return static_cast<size_t>((uint64_t{bits} * slots_.size()) >> 32);
  }

  size_t next(size_t at) const { return at + 1 == slots_.size() ? 0 : at + 1; }

  // Steps forward from `from` to `to`, cyclically.
  size_t distance(size_t from, size_t to) const {
    return to >= from ? to - from : to + slots_.size() - from;
  }

  // Every id filed is distinct: the first free slot from its home is its place.
  void place(Slot s) {
    size_t at = home(s.bits);
    while (slots_[at].id != kNone) {
      at = next(at);
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
