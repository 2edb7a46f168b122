// LatencyHistogram: a duration lands in the first bucket whose bound it does not exceed (a
// bound is inclusive, as Prometheus's `le`), past the last bound in the overflow bucket; the
// count and the sum cover every recording.
#include "prefetch/latency_histogram.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("durations land in the bucket of their upper bound", "[latency_histogram]") {
  LatencyHistogram h;
  h.record(50'000);          // 50 µs: the first bucket (<= 100 µs)
  h.record(100'000);         // exactly 100 µs: still the first
  h.record(100'001);         // just past: the second (<= 250 µs)
  h.record(2'000'000'000);   // 2 s: the bucket <= 5 s
  h.record(60'000'000'000);  // a minute: the overflow bucket
  h.record(-5);              // a clock step back counts as 0
  const auto s = h.snapshot();
  CHECK(s.counts[0] == 3);
  CHECK(s.counts[1] == 1);
  CHECK(s.counts[LatencyHistogram::kBounds.size() - 1] == 1);
  CHECK(s.counts[LatencyHistogram::kBounds.size()] == 1);
  CHECK(s.count == 6);
  CHECK(s.sum_s == Approx(62.000250001));
}

}  // namespace
}  // namespace epochfs::prefetch
