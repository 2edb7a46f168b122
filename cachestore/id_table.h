// IdTable: a value for some of the dense ids the registry hands out (FileId), without a node
// per value.
//
// A value lives in a slot of a chunk of kChunkSlots; a vector by id holds each id's slot number.
// A node-based map (std::unordered_map) cost a value plus ~32 bytes of node, allocator and
// bucket per entry; here a value costs itself plus 4 to 5 bytes per id handed out (ids are
// dense, as the eviction policies' vectors by id already assume) and a bit saying its slot is
// free. A slot freed serves a later insert; chunks are kept: the table holds the most values it
// ever held at once (the cache's entries, bounded by its capacity).
//
// Values do not move while they are in the table: a pointer from find() stays good until that
// id is erased. Not thread-safe: its owner locks it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace epochfs::cachestore {

template <class T>
class IdTable {
 public:
  T* find(uint32_t id) {
    const uint32_t s = slot_of(id);
    return s == kAbsent ? nullptr : &at(s);
  }

  const T* find(uint32_t id) const {
    const uint32_t s = slot_of(id);
    return s == kAbsent ? nullptr : &chunks_[s / kChunkSlots][s % kChunkSlots];
  }

  bool contains(uint32_t id) const { return slot_of(id) != kAbsent; }

  // Gives id the value; id must have none. Throws std::bad_alloc with nothing changed.
  T& insert(uint32_t id, const T& value) {
    if (id >= slots_.size()) {
      grow_slots(id);
    }
    if (roomy_.empty()) {
      add_chunk();
    }
    const uint32_t s = take_free_slot(roomy_.back());
    slots_[id] = s;
    ++size_;
    return at(s) = value;
  }

  // Removes id's value, if it has one. Never throws.
  void erase(uint32_t id) {
    const uint32_t s = slot_of(id);
    if (s == kAbsent) {
      return;
    }
    at(s) = T{};
    slots_[id] = kAbsent;
    const uint32_t c = s / kChunkSlots;
    free_bits_[s / 64] |= uint64_t{1} << (s % 64);
    if (free_count_[c]++ == 0) {
      roomy_.push_back(c);  // within the capacity reserved as its chunk was made
    }
    --size_;
  }

  size_t size() const { return size_; }

  // Calls f(id, value) for each value, by id; f may erase the id it is given.
  template <class F>
  void for_each(const F& f) {
    for (size_t id = 0; id < slots_.size(); ++id) {
      if (slots_[id] != kAbsent) {
        f(static_cast<uint32_t>(id), at(slots_[id]));
      }
    }
  }

  template <class F>
  void for_each(const F& f) const {
    for (size_t id = 0; id < slots_.size(); ++id) {
      if (slots_[id] != kAbsent) {
        f(static_cast<uint32_t>(id), chunks_[slots_[id] / kChunkSlots][slots_[id] % kChunkSlots]);
      }
    }
  }

  // Bytes held: chunks, the slot per id and the free slots' bits. For tests and benchmarks.
  size_t bytes() const {
    return chunks_.size() * kChunkSlots * sizeof(T) + slots_.capacity() * sizeof(uint32_t) +
           free_bits_.capacity() * sizeof(uint64_t) + free_count_.capacity() * sizeof(uint16_t) +
           roomy_.capacity() * sizeof(uint32_t) + chunks_.capacity() * sizeof(std::unique_ptr<T[]>);
  }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  static constexpr uint32_t kChunkSlots = 1024;
  static constexpr uint32_t kChunkWords = kChunkSlots / 64;

  uint32_t slot_of(uint32_t id) const { return id < slots_.size() ? slots_[id] : kAbsent; }

  T& at(uint32_t s) { return chunks_[s / kChunkSlots][s % kChunkSlots]; }

  // Ids are dense and come in order: a quarter more at a time, not double, wastes at most a
  // fifth of the vector. reserve() first, or resize() would double the capacity itself.
  void grow_slots(uint32_t id) {
    const size_t most = size_t{1} << 32;  // every uint32_t id
    const size_t want = std::max<size_t>(id + size_t{1}, slots_.size() + slots_.size() / 4);
    const size_t size = std::min(most, want);
    slots_.reserve(size);
    slots_.resize(size, kAbsent);
  }

  // The lowest free slot of chunk c, taken; c has one.
  uint32_t take_free_slot(uint32_t c) {
    for (uint32_t w = c * kChunkWords;; ++w) {
      if (free_bits_[w] != 0) {
        const auto bit = static_cast<uint32_t>(__builtin_ctzll(free_bits_[w]));
        free_bits_[w] &= free_bits_[w] - 1;
        if (--free_count_[c] == 0) {
          roomy_.pop_back();
        }
        return w * 64 + bit;
      }
    }
  }

  // A chunk of free slots. Every chunk has room in roomy_, so erase never allocates.
  void add_chunk() {
    const size_t n = chunks_.size() + 1;
    if (roomy_.capacity() < n) {
      roomy_.reserve(std::max<size_t>(n, roomy_.capacity() + roomy_.capacity() / 4 + 4));
    }
    if (chunks_.capacity() < n) {
      chunks_.reserve(roomy_.capacity());
    }
    free_bits_.reserve(roomy_.capacity() * kChunkWords);
    free_count_.reserve(roomy_.capacity());
    chunks_.push_back(std::make_unique<T[]>(kChunkSlots));  // the last step that may throw
    free_bits_.resize(n * kChunkWords, ~uint64_t{0});
    free_count_.push_back(kChunkSlots);
    roomy_.push_back(static_cast<uint32_t>(n - 1));
  }

  std::vector<uint32_t> slots_;  // by id: its value's slot, or kAbsent
  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<uint64_t> free_bits_;   // by slot: set while it holds no value
  std::vector<uint16_t> free_count_;  // by chunk: its free slots
  std::vector<uint32_t> roomy_;       // chunks with a free slot, each once
  size_t size_ = 0;
};

}  // namespace epochfs::cachestore
