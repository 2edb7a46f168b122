#include "prefetch/source_guard.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <system_error>
#include <thread>

#include <catch2/catch.hpp>

#include "test/support/scratch_dir.h"

namespace epochfs::prefetch {
namespace {

using cachestore::Result;
using cachestore::Status;
using std::chrono::milliseconds;

// A scratch directory as the source root (what the prober stats).
struct Root {
  Root() { root.emplace(std::move(cachestore::RootDir::open(path).value())); }

  test::ScratchDir dir{"guard"};
  std::string path = dir.path();
  std::optional<cachestore::RootDir> root;
};

// A call into a source that hangs until released.
struct Hang {
  std::promise<void> released;
  std::shared_future<void> gate = released.get_future().share();

  std::function<Result<int>()> call() {
    return [gate = gate]() -> Result<int> {
      gate.wait();
      return 1;
    };
  }
};

void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 100 && !done(); ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  REQUIRE(done());
}

}  // namespace

TEST_CASE("an unanswered call marks the source down and the prober brings it back",
          "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{0.1, 5, 4});
  std::atomic<int> recoveries{0};
  guard.start([&] { ++recoveries; });
  Hang hang;
  // A caller with an answer of its own is told of the outage once the timeout passes.
  auto first = guard.call<int>("", true, hang.call());
  CHECK(is_outage_error(first.error_code()));
  CHECK(guard.down());
  CHECK(guard.health().timed_out == 1);
  CHECK(guard.health().outages == 1);
  // While it is down, such a caller is told at once: its call never runs.
  std::atomic<int> ran{0};
  auto second = guard.call<int>("", true, [&]() -> Result<int> {
    ++ran;
    return 2;
  });
  CHECK(is_outage_error(second.error_code()));
  CHECK(ran == 0);
  // The probe (a stat of the root) answers: the source is up again, the planner told.
  hang.released.set_value();
  wait_until([&] { return !guard.down(); });
  CHECK(recoveries == 1);
  CHECK(guard.call<int>("", true, [] { return Result<int>(3); }).value() == 3);
}

TEST_CASE("a caller with no answer of its own waits for the source and then fails with EIO",
          "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{1, 0.3, 4});
  guard.start({});
  // The path the prober asks again is missing for good: ENOENT is an answer, so the source
  // would be up again; a transport error stays an outage.
  std::atomic<int> ran{0};
  auto result = guard.call<int>("", false, [&]() -> Result<int> {
    ++ran;
    return Status::error(ENOTCONN, "stat");
  });
  CHECK(result.error_code() == EIO);
  CHECK(ran >= 1);
  const auto h = guard.health();
  CHECK(h.failed + h.waited >= 1);
}

TEST_CASE("an error that names the file is not an outage", "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{1, 5, 4});
  guard.start({});
  auto result = guard.call<int>("", false, [] { return Result<int>(Status::error(EIO, "read")); });
  CHECK(result.error_code() == EIO);
  CHECK_FALSE(guard.down());
  CHECK(answer_instead(EIO));
  CHECK_FALSE(is_outage_error(ENOENT));
}

TEST_CASE("a cancelled caller stops waiting and a late cancel hits no other request",
          "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{30, 30, 4});
  guard.start({});
  Cancel cancel;
  int request_a = 0;
  int request_b = 0;
  cancel.begin(&request_a);
  Cancel::Scope scope(&cancel);
  Hang hang;
  auto canceller = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(200));
    CHECK(cancel.cancel(&request_a));
    guard.wake();
  });
  auto result = guard.call<int>("", false, hang.call());
  canceller.get();
  CHECK(result.error_code() == EINTR);
  CHECK(guard.health().interrupted == 1);
  cancel.begin(&request_b);
  CHECK_FALSE(cancel.cancel(&request_a));  // an interrupt for the request already answered
  CHECK_FALSE(cancel.cancelled());
  hang.released.set_value();
}

}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

TEST_CASE("a calling thread that cannot start fails the call, not the daemon", "[source_guard]") {
  Root r;
  SourceGuardOptions options{1, 5, 4};
  std::atomic<int> refused{0};
  options.start_thread = [&](std::function<void()> body) -> std::thread {
    if (refused.fetch_add(1) == 0) {
      throw std::system_error(EAGAIN, std::generic_category(), "pthread_create");
    }
    return std::thread(std::move(body));
  };
  SourceGuard guard(*r.root, options);
  guard.start({});
  auto first = guard.call<int>("", false, [] { return Result<int>(1); });
  CHECK(first.error_code() == EIO);
  CHECK_FALSE(guard.down());
  // The next call gets its thread.
  auto second = guard.call<int>("", false, [] { return Result<int>(2); });
  REQUIRE(second.is_ok());
  CHECK(second.value() == 2);
}

TEST_CASE("abandoned attempts that return at once each keep their own result", "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{0.1, 30, 8});
  guard.start({});
  Hang hang;
  std::atomic<int> attempts{0};
  std::atomic<int> finished{0};
  constexpr int kHung = 3;
  // The first attempts hang (each times out, the source goes down, the prober brings it back
  // and the caller tries again); the last answers. Then the hung ones all return together,
  // each with a result of its own (a string on the heap).
  auto result = guard.call<std::string>("", false, [&]() -> Result<std::string> {
    const int k = attempts.fetch_add(1);
    if (k < kHung) {
      hang.gate.wait();
      std::string late(4096, static_cast<char>('a' + k));
      finished.fetch_add(1);
      return late;
    }
    return std::string("answered");
  });
  REQUIRE(result.is_ok());
  CHECK(result.value() == "answered");
  CHECK(attempts.load() == kHung + 1);
  hang.released.set_value();
  wait_until([&] { return finished.load() == kHung; });
  CHECK(guard.health().timed_out == kHung);
}

TEST_CASE("a path whose call hangs makes no new call until that one returns", "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{0.1, 0.6, 8});
  guard.start({});
  Hang hang;
  std::atomic<int> calls{0};
  // A read of d/f hangs (its stat would answer: the prober does not ask it).
  auto hung = guard.call<int>("d/f", false, [&]() -> Result<int> {
    ++calls;
    hang.gate.wait();
    return 1;
  });
  CHECK(hung.error_code() == EIO);  // waited out --outage-wait with no second attempt
  CHECK(calls == 1);
  CHECK(guard.health().hung_paths == 1);
  CHECK(!guard.down());  // the root answered: the rest of the source is up
  // Other paths are called as usual; the hung one and those under it are not called again.
  CHECK(guard.call<int>("d/g", false, [] { return Result<int>(2); }).value() == 2);
  for (const char* path : {"d/f", "d/f/x"}) {
    auto again = guard.call<int>(path, false, [&]() -> Result<int> {
      ++calls;
      return 3;
    });
    CHECK(again.error_code() == EIO);
  }
  CHECK(calls == 1);
  CHECK(guard.health().timed_out == 1);
  // The stuck call returns: the path is called again.
  hang.released.set_value();
  wait_until([&] { return guard.health().hung_paths == 0; });
  CHECK(guard.call<int>("d/f", false, [] { return Result<int>(4); }).value() == 4);
}

TEST_CASE("past the hung paths kept, the source stays down until a stuck call returns",
          "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{0.05, 30, 16});
  guard.start({});
  Hang hang;
  for (size_t i = 0; i <= SourceGuard::kMaxHungPaths; ++i) {
    wait_until([&] { return !guard.down(); });  // the root answered after the last one
    auto result = guard.call<int>("f" + std::to_string(i), true, hang.call());
    CHECK(is_outage_error(result.error_code()));
  }
  CHECK(guard.health().hung_paths == SourceGuard::kMaxHungPaths);
  std::this_thread::sleep_for(milliseconds(1200));  // two probe periods and more
  CHECK(guard.down());
  hang.released.set_value();
  wait_until([&] { return !guard.down() && guard.health().hung_paths == 0; });
}

TEST_CASE("a call that timed out still queued leaves its path clear", "[source_guard]") {
  Root r;
  SourceGuard guard(*r.root, SourceGuardOptions{0.2, 30, 1});  // one calling thread
  guard.start({});
  Hang hang;
  std::atomic<int> ran{0};
  // a's call takes the one thread and hangs; b's, made meanwhile, waits in the queue, times
  // out and never runs.
  std::atomic<bool> a_running{false};
  auto a = std::async(std::launch::async, [&] {
    return guard.call<int>("a", true, [&]() -> Result<int> {
      a_running = true;
      hang.gate.wait();
      return 1;
    });
  });
  wait_until([&] { return a_running.load(); });
  auto b = guard.call<int>("b", true, [&]() -> Result<int> {
    ++ran;
    return 2;
  });
  CHECK(is_outage_error(b.error_code()));
  CHECK(is_outage_error(a.get().error_code()));
  // b never reached the source: it is clear again at the prober's next look; a stays hung
  // until its call returns.
  wait_until([&] { return !guard.hung("b"); });
  CHECK(guard.hung("a"));
  CHECK(ran == 0);
  hang.released.set_value();
  wait_until([&] { return !guard.down() && guard.health().hung_paths == 0; });
}

}  // namespace
}  // namespace epochfs::prefetch
