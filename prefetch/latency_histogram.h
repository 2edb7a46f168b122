// LatencyHistogram: counts of durations in fixed buckets, for Prometheus histograms (open and
// copy latency). A smoothed mean hides the slow tail a stalled trainer feels; buckets let a
// dashboard take quantiles across mounts and time.
//
// Thread-safety: record() and snapshot() may be called from any thread; relaxed atomics (a
// snapshot may see a recording's bucket and not yet its sum: a statistic, not an invariant).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace epochfs::prefetch {

class LatencyHistogram {
 public:
  // Upper bounds of the buckets, in seconds (Prometheus's `le`); a last bucket takes the rest.
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> counts{};  // per bucket, not cumulative
    uint64_t count = 0;
    double sum_s = 0;
  };

  void record(int64_t ns) {
    const double s = ns < 0 ? 0 : static_cast<double>(ns) / 1e9;
    size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) {
      ++i;
    }
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns < 0 ? 0 : static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }

  Snapshot snapshot() const {
    Snapshot out;
    for (size_t i = 0; i < counts_.size(); ++i) {
      out.counts[i] = counts_[i].load(std::memory_order_relaxed);
      out.count += out.counts[i];
    }
    out.sum_s = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
    return out;
  }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace epochfs::prefetch
