// RecentIds: whether a file id was marked within a time window, for work worth doing once per
// window (reading a cached copy ahead: a block an order names up to 16 times an epoch is asked
// for once, not at each of its entries).
//
// Bounded: a direct-mapped table of kSlots atomic words (the id, and the mark's time in ms),
// indexed by id: an id whose slot another took since counts as unmarked, so the work is done
// again; never skipped wrongly for long, since a mark lapses with the window, or at forget().
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

  // True if id was marked less than the window before now_ns, and after the last forget();
  // else marks it at now_ns.
  bool marked(cachestore::FileId id, int64_t now_ns) {
    if (recent(id, now_ns)) {
      return true;
    }
    slots_[id % kSlots].store(uint64_t{id} << 32 | ms_of(now_ns), std::memory_order_relaxed);
    return false;
  }

  // Whether id was marked less than the window before now_ns, and after the last forget().
  bool recent(cachestore::FileId id, int64_t now_ns) const {
    const uint32_t now_ms = ms_of(now_ns);
    const uint64_t word = slots_[id % kSlots].load(std::memory_order_relaxed);
    const auto age_ms = static_cast<uint32_t>(now_ms - static_cast<uint32_t>(word));
    const uint64_t forgot = forgot_.load(kRelaxed);
    const auto since_forgot_ms = static_cast<uint32_t>(now_ms - static_cast<uint32_t>(forgot));
    return word != 0 && (word >> 32) == id && age_ms < window_ms_ &&
           (forgot == 0 || age_ms < since_forgot_ms);
  }

  // Every mark made before now_ns (or in its millisecond) counts as lapsed.
  void forget(int64_t now_ns) { forgot_.store(uint64_t{1} << 32 | ms_of(now_ns), kRelaxed); }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;

  static uint32_t ms_of(int64_t ns) { return static_cast<uint32_t>(ns / 1'000'000); }

  const int64_t window_ms_;
  // When forget() was last called, in the low 32 bits; 0 if never.
  std::atomic<uint64_t> forgot_{0};
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace epochfs::prefetch
