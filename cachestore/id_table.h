// IdTable: a value for some of the dense ids the registry hands out (FileId), without a node
// per value.
//
// A value lives in a slot of a chunk of kChunkSlots; a vector by id holds each id's slot number.
// A node-based map (std::unordered_map) cost a value plus ~32 bytes of node, allocator and
// bucket per entry; here a value costs itself plus 4 to 8 bytes per id handed out (ids are dense,
// as the eviction policies' vectors by id already assume). A slot freed serves the next insert;
// chunks are kept: the table holds the most values it ever held at once (the cache's entries,
// bounded by its capacity).
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
      const size_t most = size_t{1} << 32;  // every uint32_t id
      slots_.resize(std::max<size_t>(id + size_t{1}, std::min(most, 2 * slots_.size())), kAbsent);
    }
    if (free_.empty()) {
      add_chunk();
    }
    const uint32_t s = free_.back();
    free_.pop_back();
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
    free_.push_back(s);  // within the capacity reserved as its chunk was made
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

  // Bytes held: chunks, the slot per id and the free list. For tests and benchmarks.
  size_t bytes() const {
    return chunks_.size() * kChunkSlots * sizeof(T) + slots_.capacity() * sizeof(uint32_t) +
           free_.capacity() * sizeof(uint32_t);
  }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  static constexpr uint32_t kChunkSlots = 1024;

  uint32_t slot_of(uint32_t id) const { return id < slots_.size() ? slots_[id] : kAbsent; }

  T& at(uint32_t s) { return chunks_[s / kChunkSlots][s % kChunkSlots]; }

  // A chunk of free slots; every slot made has room in free_, so erase never allocates.
  void add_chunk() {
    const auto first = static_cast<uint32_t>(chunks_.size() * kChunkSlots);
    if (free_.capacity() < first + kChunkSlots) {
      free_.reserve(std::max<size_t>(first + kChunkSlots, 2 * free_.capacity()));
    }
    chunks_.push_back(std::make_unique<T[]>(kChunkSlots));
    for (uint32_t s = first + kChunkSlots; s > first; --s) {
      free_.push_back(s - 1);  // lowest slot first: values fill chunks in order
    }
  }

  std::vector<uint32_t> slots_;  // by id: its value's slot, or kAbsent
  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<uint32_t> free_;  // slots with no value
  size_t size_ = 0;
};

}  // namespace epochfs::cachestore
