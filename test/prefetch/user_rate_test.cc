// UserRate (prefetch/user_rate.h): each user's burst, then their rate; users apart.
#include "prefetch/user_rate.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

int taken(UserRate& rate, uid_t uid, int64_t now_ns, int tries) {
  int n = 0;
  for (int i = 0; i < tries; ++i) {
    n += rate.take(uid, now_ns) ? 1 : 0;
  }
  return n;
}

TEST_CASE("a user takes their burst at once, then their rate", "[rate]") {
  UserRate rate(16, 64);
  CHECK(taken(rate, 1000, 0, 100) == 64);
  CHECK(taken(rate, 1000, kSecond / 2, 100) == 8);
  CHECK(taken(rate, 1000, kSecond / 2, 100) == 0);
  // Idle for a long time: back to the burst, no more.
  CHECK(taken(rate, 1000, 100 * kSecond, 1000) == 64);
}

TEST_CASE("one user over their rate does not hold another back", "[rate]") {
  UserRate rate(16, 64);
  CHECK(taken(rate, 1000, 0, 100) == 64);
  CHECK(taken(rate, 1001, 0, 100) == 64);
  CHECK(taken(rate, 1000, 0, 1) == 0);
}

TEST_CASE("a clock read out of order gives no tokens back", "[rate]") {
  UserRate rate(16, 64);
  CHECK(taken(rate, 1000, 10 * kSecond, 64) == 64);
  CHECK(taken(rate, 1000, 9 * kSecond, 10) == 0);
  CHECK(taken(rate, 1000, 10 * kSecond + kSecond / 4, 10) == 4);
}

}  // namespace
}  // namespace epochfs::prefetch
