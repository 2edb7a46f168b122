#include "cachestore/disk_watch.h"

#include <time.h>

namespace epochfs::cachestore {
namespace {

// The coarse clock (a few ms resolution) costs no more than a memory read, and the limit it
// is compared with is seconds. Never 0 on a running system, so 0 can mean a free slot.
int64_t coarse_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

DiskWatch::Op DiskWatch::begin() {
  const int64_t now = coarse_now_ns();
  const size_t first = next_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < kSlots; ++i) {
    std::atomic<int64_t>& slot = started_[(first + i) % kSlots];
    int64_t expected = 0;
    if (slot.load(std::memory_order_relaxed) == 0 &&
        slot.compare_exchange_strong(expected, now, std::memory_order_acq_rel)) {
      return Op(&slot);
    }
  }
  return Op();
}

bool DiskWatch::hung() const {
  const int64_t now = coarse_now_ns();
  for (const auto& slot : started_) {
    const int64_t started = slot.load(std::memory_order_acquire);
    if (started != 0 && now - started > stuck_ns_) {
      return true;
    }
  }
  return false;
}

}  // namespace epochfs::cachestore
