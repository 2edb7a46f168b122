// RecentIds: whether a file id was marked within a time window, for work worth doing once per
// window (reading a cached copy ahead: a block an order names up to 16 times an epoch is asked
// for once, not at each of its entries).
//
// Bounded: a direct-mapped table of kSlots atomic words (the id, and the mark's time in ms),
// indexed by id: an id whose slot another took since counts as unmarked, so the work is done
// again; never skipped wrongly for long, since a mark lapses with the window.
//
// Thread-safety: all methods may be called from any thread; no lock. Racing marks of one slot
// leave one of them: at worst the work is done twice.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "cachestore/file_id.h"

namespace epochfs::prefetch {

class RecentIds {
 public:
  static constexpr size_t kSlots = 4096;

  explicit RecentIds(int64_t window_ns) : window_ms_(window_ns / 1'000'000) {}

  // True if id was marked less than the window before now_ns; else marks it at now_ns.
  bool marked(cachestore::FileId id, int64_t now_ns) {
    const auto now_ms = static_cast<uint32_t>(now_ns / 1'000'000);
    std::atomic<uint64_t>& slot = slots_[id % kSlots];
    const uint64_t word = slot.load(std::memory_order_relaxed);
    const auto age_ms = static_cast<uint32_t>(now_ms - static_cast<uint32_t>(word));
    if (word != 0 && (word >> 32) == id && age_ms < window_ms_) {
      return true;
    }
    slot.store(uint64_t{id} << 32 | now_ms, std::memory_order_relaxed);
    return false;
  }

 private:
  const int64_t window_ms_;
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace epochfs::prefetch
