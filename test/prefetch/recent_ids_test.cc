// RecentIds (prefetch/recent_ids.h): an id is marked for its window, then lapses; an id whose
// slot another took counts as unmarked; forget() lapses every mark.
#include "prefetch/recent_ids.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST_CASE("an id marked is marked for the window, then lapses", "[recent_ids]") {
  RecentIds recent(1000 * kMs);
  CHECK_FALSE(recent.marked(7, 5000 * kMs));  // marks it
  CHECK(recent.marked(7, 5000 * kMs));
  CHECK(recent.marked(7, 5999 * kMs));
  CHECK_FALSE(recent.marked(7, 6000 * kMs));  // lapsed: marked again now
  CHECK(recent.marked(7, 6500 * kMs));
  CHECK_FALSE(recent.marked(8, 6500 * kMs));  // another id
}

TEST_CASE("recent asks without marking", "[recent_ids]") {
  RecentIds recent(1000 * kMs);
  CHECK_FALSE(recent.recent(7, 5000 * kMs));
  CHECK_FALSE(recent.recent(7, 5000 * kMs));  // still not marked
  CHECK_FALSE(recent.marked(7, 5000 * kMs));
  CHECK(recent.recent(7, 5999 * kMs));
  CHECK_FALSE(recent.recent(7, 6000 * kMs));
}

TEST_CASE("forget lapses every mark made before it, and none after", "[recent_ids]") {
  RecentIds recent(1000 * kMs);
  CHECK_FALSE(recent.marked(7, 5000 * kMs));
  CHECK_FALSE(recent.marked(8, 5100 * kMs));
  recent.forget(5200 * kMs);
  CHECK_FALSE(recent.marked(7, 5300 * kMs));  // forgotten: marked again now
  CHECK(recent.marked(7, 5400 * kMs));        // the new mark holds
  CHECK_FALSE(recent.marked(8, 5400 * kMs));
  CHECK(recent.marked(8, 5500 * kMs));
}

TEST_CASE("an id whose slot another took counts as unmarked", "[recent_ids]") {
  RecentIds recent(1000 * kMs);
  const cachestore::FileId a = 3;
  const cachestore::FileId b = a + RecentIds::kSlots;  // the same slot
  CHECK_FALSE(recent.marked(a, 10 * kMs));
  CHECK_FALSE(recent.marked(b, 11 * kMs));
  CHECK_FALSE(recent.marked(a, 12 * kMs));  // b took the slot: a is new again
  CHECK(recent.marked(a, 13 * kMs));
}

TEST_CASE("marks hold across the clock's 32-bit millisecond wrap", "[recent_ids]") {
  RecentIds recent(1000 * kMs);
  const int64_t wrap = (int64_t{1} << 32) * kMs;
  CHECK_FALSE(recent.marked(1, wrap - 500 * kMs));
  CHECK(recent.marked(1, wrap + 400 * kMs));
  CHECK_FALSE(recent.marked(1, wrap + 600 * kMs));
}

}  // namespace
}  // namespace epochfs::prefetch
