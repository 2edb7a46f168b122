// The Planner on its own: what its planning thread hands a sink, in what order and within how
// many slots; how opens move a stream's window; the next use it tells the cache. (Whose stream
// an upload reaches, limits and the end of jobs: jobs_test.cc.)
#include "prefetch/planner.h"

#include <chrono>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/sync.h"
#include "test/prefetch/publishers.h"

namespace epochfs::prefetch {
namespace {

using Pick = std::pair<FileId, size_t>;  // a file and the stream it was staged for

// A sink with a fixed number of copy slots: each prefetch takes one until the test frees it.
class SlotSink : public PrefetchSink {
 public:
  explicit SlotSink(unsigned slots) : slots_(slots) {}

  unsigned prefetch_slots() override {
    cachestore::MutexLock lock(mu_);
    return slots_ - busy_;
  }

  bool prefetch(FileId id, size_t stream) override {
    cachestore::MutexLock lock(mu_);
    picks_.emplace_back(id, stream);
    ++busy_;
    changed_.notify_all();
    return true;
  }

  void free_slot() {
    cachestore::MutexLock lock(mu_);
    --busy_;
  }

  // The picks once there are n of them (a hang guard of a minute, not a timing).
  std::vector<Pick> wait_for(size_t n) {
    cachestore::MutexLock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (picks_.size() < n && std::chrono::steady_clock::now() < deadline) {
      changed_.wait_for(std::chrono::milliseconds(100));
    }
    return picks_;
  }

 private:
  cachestore::Mutex mu_;
  cachestore::CondVar changed_{&mu_};
  const unsigned slots_;
  unsigned busy_ GUARDED_BY(mu_) = 0;
  std::vector<Pick> picks_ GUARDED_BY(mu_);
};

PlannerOptions window_of(uint64_t files) {
  PlannerOptions options;
  options.lookahead = Lookahead{Lookahead::Kind::kFiles, files};
  return options;
}

TEST_CASE("each stream's window is staged soonest first, the streams taking turns", "[planner]") {
  Planner planner(window_of(3));
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {10, 11, 12, 13, 14}, {}).ok);
  REQUIRE(planner.publish(user(1001), header("b", "s1", 0), {20, 21, 22, 23}, {}).ok);
  SlotSink sink(100);
  planner.start(&sink);
  const auto picks = sink.wait_for(6);
  planner.stop();
  REQUIRE(picks.size() == 6);
  std::vector<FileId> ids;
  for (const auto& [id, stream] : picks) {
    ids.push_back(id);
    CHECK(stream == picks[(ids.size() - 1) % 2].second);  // every other pick, the other stream's
  }
  CHECK(picks[0].second != picks[1].second);
  CHECK(ids == std::vector<FileId>{10, 20, 11, 21, 12, 22});
  // Three each: the window, no further.
  for (const auto& st : planner.stats().streams) {
    CHECK(st.current.copies_started == 3);
  }
}

TEST_CASE("a pass hands out no more copies than the sink has slots", "[planner]") {
  Planner planner(window_of(10));
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {1, 2, 3, 4, 5}, {}).ok);
  SlotSink sink(2);
  planner.start(&sink);
  CHECK(sink.wait_for(2).size() == 2);
  sink.free_slot();
  planner.slot_freed();
  const auto picks = sink.wait_for(3);
  planner.stop();
  REQUIRE(picks.size() == 3);  // the freed slot, and only it
  CHECK(picks[2].first == 3);
}

TEST_CASE("opens move a stream's window forward", "[planner]") {
  Planner planner(window_of(2));
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {1, 2, 3, 4}, {}).ok);
  SlotSink sink(100);
  planner.start(&sink);
  REQUIRE(sink.wait_for(2).size() == 2);
  REQUIRE(planner.on_open(1, 1000).has_value());
  const auto picks = sink.wait_for(3);
  planner.stop();
  REQUIRE(picks.size() == 3);
  CHECK(picks[2].first == 3);
}

TEST_CASE("another user's open of a file does not move the stream", "[planner]") {
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {1, 2}, {}).ok);
  CHECK_FALSE(planner.on_open(1, 2000).has_value());
  CHECK(planner.on_open(1, 1000).has_value());
  CHECK(planner.stats().unscheduled_opens == 1);
}

TEST_CASE("next use is the order's position, nothing for a file no order names", "[planner]") {
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {5, 6, 7}, {}).ok);
  CHECK(planner.next_use(5) < planner.next_use(6));
  CHECK(planner.next_use(6) < planner.next_use(7));
  CHECK(planner.next_use(8) == Schedule::kNever);
  REQUIRE(planner.on_open(5, 1000).has_value());
  CHECK(planner.next_use(5) == Schedule::kNever);  // read, and not named again
}

TEST_CASE("a stream's epoch record counts its opens, hits and misses", "[planner]") {
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "s0", 0), {1, 2, 3}, {}).ok);
  REQUIRE(planner.publish(user(1000), header("a", "s0", 1), {3, 2, 1}, {}).ok);  // ahead
  for (FileId id : {1, 2, 3}) {
    auto stream = planner.on_open(id, 1000);
    REQUIRE(stream.has_value());
    planner.count_open(*stream, OpenOutcome{id != 2, false, 0});
  }
  // Epoch 0 ended with its last open's count: it is in the history, whole, and epoch 1 is on.
  const auto st = planner.stats().streams.at(0);
  CHECK(st.view.epoch == 1);
  REQUIRE(st.history.size() == 1);
  CHECK(st.history[0].epoch == 0);
  CHECK(st.history[0].opens == 3);
  CHECK(st.history[0].hits == 2);
  CHECK(st.history[0].misses == 1);
}

}  // namespace
}  // namespace epochfs::prefetch
