#include "prefetch/stager.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {

TEST_CASE("a job that throws is counted and the pool goes on", "[stager]") {
  // Before, the exception left the pool thread and ended the process in std::terminate.
  Stager stager(1, 100);
  std::atomic<int> ran{0};
  REQUIRE(stager.try_submit([] { throw std::bad_alloc(); }));
  REQUIRE(stager.try_submit([] { throw 7; }));
  REQUIRE(stager.try_submit([&] { ran.fetch_add(1); }));
  for (int i = 0; i < 1000 && (ran.load() == 0 || stager.pending() > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(ran.load() == 1);
  CHECK(stager.jobs_failed() == 2);
  CHECK(stager.pending() == 0);
}

TEST_CASE("copies a reader waits for run before queued prefetch copies", "[stager]") {
  Stager stager(1, 100);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::string> ran;
  // Hold the one thread so that everything after queues up.
  REQUIRE(stager.try_submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  }));
  const auto job = [&](std::string name) {
    return [&, name] {
      std::lock_guard<std::mutex> lock(mu);
      ran.push_back(name);
    };
  };
  REQUIRE(stager.try_submit(job("prefetch 1"), Stager::Priority::kPrefetch));
  REQUIRE(stager.try_submit(job("prefetch 2"), Stager::Priority::kPrefetch));
  REQUIRE(stager.try_submit(job("demand"), Stager::Priority::kDemand));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (int i = 0; i < 1000 && stager.pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(stager.pending() == 0);
  std::lock_guard<std::mutex> lock(mu);  // the jobs wrote it on the stager's thread
  CHECK(ran == std::vector<std::string>{"demand", "prefetch 1", "prefetch 2"});
}

TEST_CASE("the stager refuses jobs past its bound and after shutdown", "[stager]") {
  Stager stager(1, 2);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  const auto blocked = [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  };
  CHECK(stager.try_submit(blocked));
  CHECK(stager.try_submit([] {}));
  CHECK_FALSE(stager.try_submit([] {}));  // two queued or running already
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  stager.shutdown();
  CHECK_FALSE(stager.try_submit([] {}));
  CHECK(stager.pending() == 0);
}

}  // namespace epochfs::prefetch
