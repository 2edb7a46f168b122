// Flights: one copy per file, readers taking queued prefetches over, waits that give up on a
// stuck copy or a killed reader. A fake clock: no test here sleeps for the timeouts it checks.
#include "prefetch/flights.h"

#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "prefetch/cancel.h"

namespace epochfs::prefetch {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// The rule a waiter gave before the engine judged stuck copies itself: idle for limit_ns.
Flights::Stuck idle_for(int64_t limit_ns) {
  return [limit_ns](int64_t idle_ns) { return idle_ns >= limit_ns; };
}

// A clock that moves only when told to, or by `step` at every reading.
struct FakeClock {
  std::atomic<int64_t> now{kSecond};
  int64_t step = 0;

  Flights::Clock clock() {
    return [this] { return now.fetch_add(step) + step; };
  }
};

TEST_CASE("a file has one flight: the second claim is told to wait", "[flights]") {
  FakeClock t;
  Flights f(t.clock(), std::chrono::milliseconds(1));
  CHECK(f.claim(7) == Flights::Claim::kOwned);
  CHECK(f.claim(7) == Flights::Claim::kInFlight);
  CHECK(f.claim(8) == Flights::Claim::kOwned);
  f.end(7);
  CHECK(f.claim(7) == Flights::Claim::kOwned);
}

TEST_CASE("a reader takes over a queued prefetch, whose job then skips itself", "[flights]") {
  FakeClock t;
  Flights f(t.clock(), std::chrono::milliseconds(1));
  const uint64_t gen = f.begin_prefetch(3);
  REQUIRE(gen != 0);
  CHECK(f.begin_prefetch(3) == 0);  // one flight per file
  CHECK(f.prefetches() == 1);
  CHECK(f.claim(3) == Flights::Claim::kOwned);
  CHECK(f.prefetches() == 1);  // the slot is kept until the job leaves the queue
  CHECK_FALSE(f.start_prefetch(3, gen));
  CHECK(f.prefetches() == 0);
  // The queued job's end (by generation) does not end the reader's flight.
  f.end(3, gen);
  CHECK(f.claim(3) == Flights::Claim::kInFlight);
}

TEST_CASE("a running prefetch cannot be taken over, and its end frees its slot", "[flights]") {
  FakeClock t;
  Flights f(t.clock(), std::chrono::milliseconds(1));
  const uint64_t gen = f.begin_prefetch(3);
  REQUIRE(f.start_prefetch(3, gen));
  CHECK(f.claim(3) == Flights::Claim::kInFlight);
  f.end(3);
  CHECK(f.prefetches() == 0);
  CHECK(f.claim(3) == Flights::Claim::kOwned);
}

TEST_CASE("a wait for a file with no flight returns at once", "[flights]") {
  FakeClock t;
  Flights f(t.clock(), std::chrono::milliseconds(1));
  uint64_t stall = 0;
  CHECK(f.wait(1, kSecond, idle_for(kSecond), &stall) == Flights::Wait::kNoFlight);
  CHECK(stall == 0);
}

TEST_CASE("a waiter gives up on a copy that has made no progress", "[flights]") {
  FakeClock t;
  Flights f(t.clock(), std::chrono::milliseconds(1));
  REQUIRE(f.claim(1) == Flights::Claim::kOwned);
  t.now += 3 * kSecond;  // nothing written since the claim
  uint64_t stall = 0;
  CHECK(f.wait(1, 10 * kSecond, idle_for(2 * kSecond), &stall) == Flights::Wait::kStuck);
  CHECK(stall == 0);
  SECTION("progress keeps it alive until the wait's own limit") {
    t.step = kSecond / 2;  // every reading of the clock: half a second later
    f.note_progress(1);
    CHECK(f.wait(1, 1 * kSecond, idle_for(2 * kSecond), &stall) == Flights::Wait::kTimedOut);
    CHECK(stall >= static_cast<uint64_t>(kSecond));
  }
}

TEST_CASE("a waiter wakes when the flight ends", "[flights]") {
  // The owner ends the flight once the waiter has read the clock under the lock: the end then
  // waits for that lock, which the waiter gives up only inside its wait.
  std::atomic<int> readings{0};
  Flights f([&] {
    ++readings;
    return cachestore::now_ns();
  });
  REQUIRE(f.claim(1) == Flights::Claim::kOwned);
  const int before = readings;
  std::thread owner([&] {
    while (readings < before + 2) {
      std::this_thread::yield();
    }
    f.end(1);
  });
  uint64_t stall = 0;
  const auto wait = f.wait(1, 3600 * kSecond, idle_for(3600 * kSecond), &stall);
  owner.join();
  CHECK(wait == Flights::Wait::kEnded);
}

TEST_CASE("a waiter whose reader is killed stops waiting within a poll", "[flights]") {
  FakeClock t;  // stands still: only the cancel can end the wait
  Flights f(t.clock(), std::chrono::milliseconds(1));
  REQUIRE(f.claim(1) == Flights::Claim::kOwned);
  Cancel cancel;
  int request = 0;
  cancel.begin(&request);
  Cancel::Scope scope(&cancel);
  std::thread killer([&] { cancel.cancel(&request); });
  uint64_t stall = 0;
  const auto wait = f.wait(1, 3600 * kSecond, idle_for(3600 * kSecond), &stall);
  killer.join();
  CHECK(wait == Flights::Wait::kCancelled);
}

}  // namespace
}  // namespace epochfs::prefetch
