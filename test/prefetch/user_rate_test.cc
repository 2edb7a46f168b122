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

TEST_CASE("work measured once done goes into debt, which the user then waits out", "[rate]") {
  UserRate rate(100, 1000);  // ms of CPU: a tenth of a core, a second at once
  CHECK(rate.wait_s(1000, 0) == 0);
  rate.spend(1000, 1500, 0);                    // a publish took 1.5 s
  CHECK(rate.wait_s(1000, 0) == Approx(5.01));  // back to 1 ms from -500 at 100 ms a second
  CHECK(rate.wait_s(1000, 5 * kSecond) == Approx(0.01));
  CHECK(rate.wait_s(1000, 6 * kSecond) == 0);
  CHECK(rate.wait_s(1001, 0) == 0);  // another user's bucket is full
}

}  // namespace
}  // namespace epochfs::prefetch
