#include "prefetch/copy_concurrency.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

// A source as a queue sees it: a copy alone takes latency_s; the link passes at most
// files_per_s. With n copies in flight they end at min(n / latency, link) a second, oldest
// first, each after the time since its start. A new copy starts whenever fewer than the limit
// are in flight, so when the limit drops the copies in flight drain first, as the planner's
// slots do. Feeds `copies` completions in simulated time; returns the highest limit seen.
struct Source {
  explicit Source(double latency, double link = std::numeric_limits<double>::infinity())
      : latency_s(latency), files_per_s(link) {}

  double latency_s;
  double files_per_s;
  int64_t now_ns = 1;
  std::deque<int64_t> started;  // in flight, oldest first

  unsigned run(CopyConcurrency& c, int copies, bool busy = true) {
    unsigned highest = 0;
    for (int i = 0; i < copies; ++i) {
      while (started.size() < c.limit()) {
        started.push_back(now_ns);
      }
      const double n = static_cast<double>(started.size());
      const double rate = std::min(n / latency_s, files_per_s);
      now_ns += static_cast<int64_t>(1e9 / rate);
      const int64_t start = started.front();
      started.pop_front();
      c.finished(now_ns - start, now_ns, busy);
      highest = std::max(highest, c.limit());
    }
    return highest;
  }
};

}  // namespace

TEST_CASE("the copy limit settles near the source's rate times a copy's time", "[copy_limit]") {
  // 5 ms a copy, a link of 2,700 files/s (300 MB/s of 110 KB files): 13.5 copies fill it.
  CopyConcurrency c(128);
  Source source(0.005, 2700);
  CHECK(c.limit() == CopyConcurrency::kInitial);
  source.run(c, 2000);
  const double product = 2700 * 0.005;
  CHECK(c.limit() >= product);
  CHECK(c.limit() <= CopyConcurrency::kGain * product + 1);
  // A minute on, with the base measured again every few seconds: no drift upwards (copies
  // queued behind the headroom must not be taken for a slower source).
  const unsigned highest = source.run(c, 60 * 2700);
  CHECK(highest <= CopyConcurrency::kGain * product + 1);
  CHECK(c.limit() >= product);
}

TEST_CASE("the copy limit grows to the threads when more copies end sooner", "[copy_limit]") {
  // No link limit: every copy more in flight is more copies a second.
  CopyConcurrency c(64);
  Source source(0.005);
  source.run(c, 1000);
  CHECK(c.limit() == 64);
  CHECK(c.rounds() < 40);
}

TEST_CASE("rounds with idle slots do not grow the copy limit", "[copy_limit]") {
  CopyConcurrency c(128);
  Source source(0.005);
  source.run(c, 500, false);  // the planner had nothing more to stage
  CHECK(c.limit() == CopyConcurrency::kInitial);
  CHECK(c.rounds() > 0);
}

TEST_CASE("the copy limit follows a source that becomes slower", "[copy_limit]") {
  CopyConcurrency c(256);
  Source source(0.005, 2700);
  source.run(c, 20 * 2700);
  const unsigned before = c.limit();
  // The server is loaded: each copy now takes 20 ms alone, the link the same.
  source.latency_s = 0.020;
  source.run(c, 20 * 2700);
  CHECK(c.limit() >= 2700 * 0.020);
  CHECK(c.limit() > before);
  CHECK(c.limit() <= CopyConcurrency::kGain * 2700 * 0.020 + 1);
}

TEST_CASE("the copy limit stays within one and the threads", "[copy_limit]") {
  CopyConcurrency one(1);
  Source source(0.005);
  source.run(one, 100);
  CHECK(one.limit() == 1);
  CopyConcurrency c(4);
  source.run(c, 100);
  CHECK(c.limit() == 4);
}

}  // namespace epochfs::prefetch
