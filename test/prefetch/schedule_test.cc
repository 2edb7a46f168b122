#include "prefetch/schedule.h"

#include <errno.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "prefetch/blocks.h"

namespace epochfs::prefetch {
namespace {

using Files = std::vector<FileId>;

constexpr uint64_t kNever = Schedule::kNever;

Files range(FileId first, size_t n) {
  Files out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

Files shuffled(Files files, uint32_t seed) {
  std::mt19937 rng(seed);
  std::shuffle(files.begin(), files.end(), rng);
  return files;
}

Schedule::Published publish(Schedule& s, const std::string& stream, std::optional<uint64_t> epoch,
                            Files entries) {
  auto r = s.publish(stream, epoch, std::move(entries));
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return r.value();
}

// Everything next_to_stage hands out now, in order.
Files stage_all(Schedule& s, size_t stream, uint64_t ahead) {
  Files out;
  while (auto f = s.next_to_stage(stream, ahead)) {
    out.push_back(*f);
  }
  return out;
}

// Opens each file, requiring that it matched `stream` without starting a new epoch.
void open_all(Schedule& s, const Files& files, size_t stream = 0) {
  for (FileId f : files) {
    INFO("open " << f);
    const auto m = s.on_open(f);
    REQUIRE(m.has_value());
    CHECK(m->stream == stream);
    CHECK_FALSE(m->new_epoch);
  }
}

Files slice(const Files& files, size_t from, size_t to) {
  return Files(files.begin() + static_cast<ptrdiff_t>(from),
               files.begin() + static_cast<ptrdiff_t>(to));
}

}  // namespace

TEST_CASE("epochs are numbered from 0, then one past the newest", "[schedule]") {
  Schedule s;
  CHECK(s.stream_count() == 0);
  auto p = publish(s, "a", std::nullopt, {1, 2, 3});
  CHECK(p.stream == 0);
  CHECK(p.epoch == 0);
  CHECK_FALSE(p.replaced);
  CHECK(publish(s, "a", std::nullopt, {4}).epoch == 1);
  CHECK(publish(s, "a", 5, {5}).epoch == 5);
  CHECK(publish(s, "a", std::nullopt, {6}).epoch == 6);
  auto v = s.view(0);
  CHECK(v.id == "a");
  CHECK(v.active);
  CHECK(v.epoch == 0);
  CHECK(v.epoch_length == 3);
  CHECK(v.position == 0);
  CHECK(v.epochs_queued == 3);
  CHECK(s.entries_held() == 6);

  // Numbering is per stream.
  p = publish(s, "b", std::nullopt, {7, 8});
  CHECK(p.stream == 1);
  CHECK(p.epoch == 0);
  CHECK(publish(s, "b", std::nullopt, {9}).epoch == 1);
  CHECK(s.stream_count() == 2);

  // The numbering continues after the current epoch was consumed and retired.
  Schedule t;
  publish(t, "x", 3, {1});
  open_all(t, {1});
  CHECK_FALSE(t.view(0).active);
  CHECK(publish(t, "x", std::nullopt, {2}).epoch == 4);

  // An order without entries is refused and creates nothing.
  auto empty = s.publish("c", std::nullopt, {});
  CHECK(empty.error_code() == EINVAL);
  CHECK(s.stream_count() == 2);
}

TEST_CASE("at most kMaxEpochsPerStream epochs are queued per stream", "[schedule]") {
  Schedule s;
  for (uint64_t e = 0; e < Schedule::kMaxEpochsPerStream; ++e) {
    publish(s, "a", std::nullopt, {static_cast<FileId>(e)});
  }
  auto full = s.publish("a", std::nullopt, {99});
  CHECK(full.error_code() == EINVAL);
  CHECK(s.entries_held() == Schedule::kMaxEpochsPerStream);
  // Replacing a queued epoch is still allowed, and another stream has its own queue.
  auto again = s.publish("a", 2, {7, 7});
  REQUIRE(again.is_ok());
  CHECK(again.value().replaced);
  CHECK(publish(s, "b", std::nullopt, {1}).epoch == 0);
  // Once the current epoch is consumed, there is room again.
  open_all(s, {0});
  CHECK(s.view(0).epoch == 1);
  CHECK(publish(s, "a", std::nullopt, {50}).epoch == Schedule::kMaxEpochsPerStream);
}

TEST_CASE("at most kMaxStreams streams", "[schedule]") {
  Schedule s;
  for (size_t i = 0; i < Schedule::kMaxStreams; ++i) {
    CHECK(publish(s, "rank" + std::to_string(i), std::nullopt, {static_cast<FileId>(i)}).stream ==
          i);
  }
  auto r = s.publish("one-too-many", std::nullopt, {100000});
  CHECK(r.error_code() == EINVAL);
  CHECK(s.stream_count() == Schedule::kMaxStreams);
  CHECK(s.on_open(100000) == std::nullopt);
  // Existing streams still publish.
  CHECK(publish(s, "rank7", std::nullopt, {200000}).stream == 7);
}

TEST_CASE("a queued epoch is replaced and an older one restarts the stream", "[schedule]") {
  Schedule s;
  publish(s, "a", 3, {1, 2, 3, 4});
  publish(s, "a", 4, {5, 6});
  open_all(s, {1, 2});
  CHECK(s.view(0).position == 2);

  SECTION("replacing a queued epoch keeps the trainer's place") {
    auto p = publish(s, "a", 4, {7, 8, 9});
    CHECK(p.replaced);
    CHECK(p.epoch == 4);
    const auto v = s.view(0);
    CHECK(v.epoch == 3);
    CHECK(v.position == 2);
    CHECK(v.epochs_queued == 1);
    CHECK(s.entries_held() == 7);
    CHECK(stage_all(s, 0, 100) == Files{3, 4, 7, 8, 9});
    CHECK(s.on_open(5) == std::nullopt);  // no longer in any order
    CHECK(s.next_use(5) == kNever);
    CHECK(s.next_use(7) == 4);  // timeline: epoch 3 holds 0..3, epoch 4 starts at 4
  }

  SECTION("replacing the current epoch starts it over") {
    auto p = publish(s, "a", 3, {10, 11});
    CHECK(p.replaced);
    const auto v = s.view(0);
    CHECK(v.epoch == 3);
    CHECK(v.epoch_length == 2);
    CHECK(v.position == 0);
    CHECK(v.epochs_queued == 1);
    CHECK(s.entries_held() == 4);
    CHECK(s.on_open(1) == std::nullopt);
    CHECK(s.on_open(3) == std::nullopt);
    CHECK(stage_all(s, 0, 100) == Files{10, 11, 5, 6});
    open_all(s, {10});
    CHECK(s.view(0).position == 1);
  }

  SECTION("an epoch older than the current one restarts the stream") {
    // A rerun of the same job, or a restart from a checkpoint: epochs 3 and 4 are dropped.
    auto p = publish(s, "a", 2, {20, 21});
    CHECK(p.restarted);
    CHECK_FALSE(p.replaced);
    const auto v = s.view(0);
    CHECK(v.epoch == 2);
    CHECK(v.position == 0);
    CHECK(v.epochs_queued == 0);
    CHECK(s.entries_held() == 2);
    CHECK(s.on_open(5) == std::nullopt);
    CHECK(s.next_use(3) == kNever);
    CHECK(stage_all(s, 0, 100) == Files{20, 21});
    // The next epoch follows the restarted one.
    CHECK(publish(s, "a", std::nullopt, {22}).epoch == 3);
  }

  SECTION("a restart drops every queued epoch, whatever the new one's number") {
    // An epoch published ahead that the trainer will not read (before a resume at a later
    // epoch): `#restart` drops it and the ones after it.
    auto p = s.publish("a", 7, {70, 71}, std::nullopt, true);
    REQUIRE(p.is_ok());
    CHECK(p.value().restarted);
    const auto v = s.view(0);
    CHECK(v.epoch == 7);
    CHECK(v.epochs_queued == 0);
    CHECK(s.entries_held() == 2);
    CHECK(s.next_use(3) == kNever);
    CHECK(stage_all(s, 0, 100) == Files{70, 71});
  }

  SECTION("an epoch between queued ones is inserted in order") {
    publish(s, "a", 6, {60});
    auto p = publish(s, "a", 5, {50, 51});
    CHECK_FALSE(p.replaced);
    CHECK(s.view(0).epochs_queued == 3);
    CHECK(stage_all(s, 0, 100) == Files{3, 4, 5, 6, 50, 51, 60});
    CHECK(s.next_use(60) == 8);
    CHECK(s.next_use(50) == 6);
    // The next default number is past the newest, not past the last published.
    auto last = s.publish("a", std::nullopt, {70});
    CHECK(last.error_code() == EINVAL);  // the queue is full (3, 4, 5, 6)
  }
}

TEST_CASE("a file repeats while two of its uses are left in one epoch", "[schedule]") {
  Schedule s;
  publish(s, "a", std::nullopt, {1, 2, 1, 3});
  publish(s, "a", std::nullopt, {2, 3, 1});
  CHECK(s.repeats(1));
  CHECK_FALSE(s.repeats(2));  // once in each epoch
  CHECK_FALSE(s.repeats(9));  // never named
  open_all(s, {1});
  CHECK_FALSE(s.repeats(1));  // one use left in each epoch
}

TEST_CASE("a block's reads use up the uses its entries stand for before the next entry",
          "[schedule]") {
  // A range order's epoch: blocks 1 and 2, each named twice, the first entry standing for
  // three uses and the second for one; the same epoch queued after it.
  Schedule s;
  for (uint64_t epoch : {0, 1}) {
    REQUIRE(s.publish("a", epoch, {1, 2, 1, 2}, std::nullopt, false, {3, 3, 1, 1}).is_ok());
  }
  constexpr uint64_t kPage = 4096;  // a sample's READ: one use, whatever its share of the block
  const auto read = [&](FileId block) { return s.on_block_read(block, kPage, true); };
  auto m = read(1);
  REQUIRE(m.has_value());
  CHECK(m->consumed);
  CHECK(s.view(0).position == 1);
  for (int i = 0; i < 2; ++i) {  // the entry's two other uses: no progress
    m = read(1);
    REQUIRE(m.has_value());
    CHECK_FALSE(m->consumed);
    CHECK(s.view(0).position == 1);
  }
  m = read(1);  // its second entry
  REQUIRE(m.has_value());
  CHECK(m->consumed);
  CHECK(s.view(0).position == 3);
  CHECK(s.view(0).epoch == 0);
  // Half the block read on from where the last READ ended: half its four uses.
  m = s.on_block_read(2, kBlockBytes / 2, false);
  REQUIRE(m.has_value());
  CHECK(m->consumed);
  m = s.on_block_read(2, kPage, true);  // its first entry's third use
  REQUIRE(m.has_value());
  CHECK_FALSE(m->consumed);
  CHECK(s.view(0).epoch == 0);
  // Block 1 read past its uses: the reader is in the next epoch.
  m = read(1);
  REQUIRE(m.has_value());
  CHECK(m->new_epoch);
  CHECK(s.view(0).epoch == 1);
}

TEST_CASE("opens in order advance the position and retire the epoch at its end", "[schedule]") {
  Schedule s;
  const Files e0 = range(10, 10);
  const Files e1 = range(20, 5);
  publish(s, "a", std::nullopt, e0);
  publish(s, "a", std::nullopt, e1);
  for (size_t i = 0; i < e0.size(); ++i) {
    open_all(s, {e0[i]});
    const auto v = s.view(0);
    if (i + 1 < e0.size()) {
      CHECK(v.epoch == 0);
      CHECK(v.position == i + 1);
    }
  }
  auto v = s.view(0);
  CHECK(v.epoch == 1);
  CHECK(v.position == 0);
  CHECK(v.epochs_queued == 0);
  CHECK(s.entries_held() == e1.size());
  open_all(s, e1);
  v = s.view(0);
  CHECK_FALSE(v.active);
  CHECK(s.entries_held() == 0);
  // Nothing is scheduled any more.
  CHECK(s.on_open(10) == std::nullopt);
  CHECK(s.next_use(20) == kNever);
  CHECK(s.next_to_stage(0, 100) == std::nullopt);
}

TEST_CASE("opens shuffled within blocks of 16 still consume the whole epoch", "[schedule]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    constexpr size_t kFiles = 10000;
    Schedule s;
    const Files e0 = shuffled(range(0, kFiles), seed);
    const Files e1 = shuffled(range(0, kFiles), seed + 100);
    publish(s, "a", std::nullopt, e0);
    const bool with_next = seed != 1;  // the next epoch queued or not
    if (with_next) {
      publish(s, "a", std::nullopt, e1);
    }
    std::mt19937 rng(seed);
    for (size_t b = 0; b < kFiles; b += 16) {
      const Files block = shuffled(slice(e0, b, std::min(kFiles, b + 16)), rng());
      for (FileId f : block) {
        const auto m = s.on_open(f);
        REQUIRE(m.has_value());
        REQUIRE_FALSE(m->new_epoch);
      }
      if (b + 16 < kFiles) {
        const auto v = s.view(0);
        REQUIRE(v.epoch == 0);
        REQUIRE(v.position == b + 16);
      }
    }
    const auto v = s.view(0);
    CHECK(v.active == with_next);
    CHECK(s.entries_held() == (with_next ? kFiles : 0));
    if (with_next) {
      CHECK(v.epoch == 1);
      CHECK(v.position == 0);
      // Every file's next use is now its place in epoch 1.
      for (size_t i = 0; i < kFiles; i += 97) {
        CHECK(s.next_use(e1[i]) == kFiles + i);
      }
    } else {
      CHECK(s.next_use(e0[0]) == kNever);
    }
  }
}

TEST_CASE("opens of files outside every order change nothing", "[schedule]") {
  Schedule s;
  CHECK(s.on_open(0) == std::nullopt);  // nothing published
  publish(s, "a", std::nullopt, {0, 5, 2});
  CHECK(s.on_open(1) == std::nullopt);  // within the ids seen, not in the order
  CHECK(s.on_open(6) == std::nullopt);  // past every id seen
  CHECK(s.on_open(UINT32_MAX) == std::nullopt);
  const auto v = s.view(0);
  CHECK(v.position == 0);
  CHECK(stage_all(s, 0, 10) == Files{0, 5, 2});
}

TEST_CASE("a file opened again is matched to its next occurrence only", "[schedule]") {
  Schedule s;
  publish(s, "a", std::nullopt, {1, 2, 3});
  open_all(s, {1});
  CHECK(s.on_open(1) == std::nullopt);  // no other occurrence: nothing changes
  CHECK(s.view(0).position == 1);
  open_all(s, {2, 3});
  CHECK_FALSE(s.view(0).active);

  // A file listed twice: the nearest unconsumed occurrence is taken each time.
  Schedule t;
  publish(t, "a", std::nullopt, {1, 2, 1, 3});
  open_all(t, {1});
  CHECK(t.view(0).position == 1);
  CHECK(t.next_use(1) == 2);
  open_all(t, {1});
  CHECK(t.view(0).position == 3);
  CHECK(t.next_use(1) == kNever);
  CHECK(t.next_use(2) == 3);  // behind the head, not consumed: needed now
  open_all(t, {2});
  CHECK(t.view(0).position == 3);
  open_all(t, {3});
  CHECK_FALSE(t.view(0).active);
}

// A reader that opens each file twice (a format sniffer, then the decoder) while the next epoch
// is already published: the second open must not throw away the current epoch.
TEST_CASE("a repeated open early in an epoch does not start the next epoch",
          "[schedule][!mayfail]") {
  Schedule s;
  const Files e0 = range(0, 100);
  publish(s, "a", std::nullopt, e0);
  publish(s, "a", std::nullopt, shuffled(e0, 5));
  open_all(s, {0});
  const auto again = s.on_open(0);
  CHECK((!again || !again->new_epoch));
  const auto v = s.view(0);
  CHECK(v.epoch == 0);
  CHECK(v.position == 1);
  // The rest of epoch 0 is still scheduled.
  CHECK(s.next_use(50) == 50);
}

TEST_CASE("opening the first entries of the next epoch starts it", "[schedule]") {
  Schedule s;
  const Files e0 = range(0, 100);
  publish(s, "a", std::nullopt, e0);
  publish(s, "a", std::nullopt, e0);  // the same order again
  open_all(s, slice(e0, 0, 90));      // 90..99 are never opened
  CHECK(s.view(0).position == 90);

  SECTION("the first entry") {
    const auto m = s.on_open(0);
    REQUIRE(m.has_value());
    CHECK(m->stream == 0);
    CHECK(m->new_epoch);
    const auto v = s.view(0);
    CHECK(v.epoch == 1);
    CHECK(v.position == 1);
    CHECK(v.epochs_queued == 0);
    CHECK(s.entries_held() == 100);
    // Files left unconsumed in epoch 0 are now needed at their place in epoch 1.
    CHECK(s.next_use(95) == 100 + 95);
    open_all(s, {1, 2});
    CHECK(s.view(0).position == 3);
  }

  SECTION("an entry a little way in") {
    const auto m = s.on_open(10);
    REQUIRE(m.has_value());
    CHECK(m->new_epoch);
    CHECK(s.view(0).epoch == 1);
    CHECK(s.view(0).position == 11);
    open_all(s, {0, 1});  // the loader's other workers, slightly behind
    CHECK(s.view(0).position == 11);
  }
}

TEST_CASE("only the first reorder-window entries of the next epoch start it", "[schedule]") {
  constexpr size_t kFiles = 10000;
  Schedule s;
  const Files e0 = range(0, kFiles);
  publish(s, "a", std::nullopt, e0);
  publish(s, "a", std::nullopt, e0);
  open_all(s, slice(e0, 0, kFiles - 1));  // the last entry is never opened
  REQUIRE(s.view(0).epoch == 0);
  // File 4096 sits at index 4096 of epoch 1: too far in to start it.
  CHECK(s.on_open(static_cast<FileId>(Schedule::kDefaultReorderWindow)) == std::nullopt);
  CHECK(s.view(0).epoch == 0);
  const auto m = s.on_open(static_cast<FileId>(Schedule::kDefaultReorderWindow - 1));
  REQUIRE(m.has_value());
  CHECK(m->new_epoch);
  CHECK(s.view(0).epoch == 1);
  CHECK(s.view(0).position == Schedule::kDefaultReorderWindow);
}

TEST_CASE("a reorder window set smaller applies to skips and to the next epoch's start",
          "[schedule]") {
  constexpr size_t kFiles = 1000;
  Schedule s(64);
  const Files e0 = range(0, kFiles);
  publish(s, "a", std::nullopt, e0);
  open_all(s, slice(e0, 0, 10));
  open_all(s, slice(e0, 20, 20 + 64 + 1));          // 10..19 now more than 64 behind the head
  CHECK(s.on_open(e0[12]) == std::nullopt);         // taken as skipped
  publish(s, "a", std::nullopt, e0);                // the next epoch
  open_all(s, slice(e0, 20 + 64 + 1, kFiles - 1));  // the last entry is never opened
  // Index 64 of the next epoch is past the window; 63 starts it.
  CHECK(s.on_open(static_cast<FileId>(64)) == std::nullopt);
  const auto m = s.on_open(static_cast<FileId>(63));
  REQUIRE(m.has_value());
  CHECK(m->new_epoch);
}

TEST_CASE("entries skipped more than the reorder window behind the head do not stall the stream",
          "[schedule]") {
  constexpr size_t kFiles = 10000;
  Schedule s;
  const Files e0 = shuffled(range(0, kFiles), 11);
  publish(s, "a", std::nullopt, e0);
  open_all(s, slice(e0, 0, 10));
  // 10..19 are skipped (a sampler that drops some files).
  open_all(s, slice(e0, 20, 100));
  CHECK(s.view(0).position == 100);
  CHECK(s.next_use(e0[12]) == 100);  // still expected, right now
  // A late open within the lag is still matched, and does not move the head.
  open_all(s, {e0[15]});
  CHECK(s.view(0).position == 100);
  // Staging starts at the oldest entry not consumed.
  CHECK(stage_all(s, 0, 5) == Files{e0[10], e0[11], e0[12], e0[13], e0[14], e0[16], e0[17], e0[18],
                                    e0[19], e0[100], e0[101], e0[102], e0[103], e0[104]});
  const size_t past_lag = 20 + Schedule::kDefaultReorderWindow + 1;
  open_all(s, slice(e0, 100, past_lag));
  // Now the skipped entries are given up: no next use, and a late open does not match.
  CHECK(s.next_use(e0[12]) == kNever);
  CHECK(s.on_open(e0[12]) == std::nullopt);
  open_all(s, slice(e0, past_lag, kFiles));
  // The epoch retired although ten of its entries were never opened.
  CHECK_FALSE(s.view(0).active);
  CHECK(s.entries_held() == 0);
}

TEST_CASE("next_to_stage hands out entries from the tail up to `ahead` past the head",
          "[schedule]") {
  Schedule s;
  CHECK(s.next_use(0) == kNever);
  publish(s, "a", std::nullopt, {10, 11, 12, 13, 14});
  publish(s, "a", std::nullopt, {20, 21, 22, 23, 24});
  CHECK(s.next_to_stage(0, 0) == std::nullopt);
  CHECK(stage_all(s, 0, 3) == Files{10, 11, 12});
  CHECK(s.view(0).planned_ahead == 3);
  CHECK(stage_all(s, 0, 3).empty());  // already handed out
  open_all(s, {10});
  CHECK(stage_all(s, 0, 3) == Files{13});
  open_all(s, {11, 12});
  // Crosses into the next epoch.
  CHECK(stage_all(s, 0, 3) == Files{14, 20});
  CHECK(s.view(0).planned_ahead == 3);
  // A larger window continues where the last one stopped, up to the last published entry.
  CHECK(stage_all(s, 0, 100) == Files{21, 22, 23, 24});
  CHECK(s.view(0).planned_ahead == 7);

  // Entries consumed out of order are skipped; unconsumed ones behind the head are not.
  Schedule t;
  publish(t, "a", std::nullopt, range(0, 10));
  open_all(t, {0, 3});
  CHECK(t.view(0).position == 4);
  CHECK(stage_all(t, 0, 4) == Files{1, 2, 4, 5, 6, 7});
}

TEST_CASE("next_use is the timeline position for one stream", "[schedule]") {
  constexpr size_t kFiles = 100;
  Schedule s;
  const Files e0 = shuffled(range(0, kFiles), 1);
  const Files e1 = shuffled(range(0, kFiles), 2);
  auto index_in = [](const Files& order, FileId f) {
    return static_cast<uint64_t>(std::find(order.begin(), order.end(), f) - order.begin());
  };
  publish(s, "a", std::nullopt, e0);
  for (FileId f = 0; f < kFiles; ++f) {
    CHECK(s.next_use(f) == index_in(e0, f));
  }
  CHECK(s.next_use(kFiles) == kNever);  // unknown
  CHECK(s.next_use(UINT32_MAX) == kNever);

  open_all(s, slice(e0, 0, 50));
  // Consumed with no known future.
  for (size_t i = 0; i < 50; ++i) {
    CHECK(s.next_use(e0[i]) == kNever);
  }
  // Not consumed: the same value as before (it does not drift as the trainer advances).
  for (size_t i = 50; i < kFiles; ++i) {
    CHECK(s.next_use(e0[i]) == i);
  }
  // Publishing the next epoch gives consumed files their place in it.
  publish(s, "a", std::nullopt, e1);
  for (FileId f = 0; f < kFiles; ++f) {
    const uint64_t in0 = index_in(e0, f);
    const uint64_t want = in0 >= 50 ? in0 : kFiles + index_in(e1, f);
    CHECK(s.next_use(f) == want);
  }
  open_all(s, slice(e0, 50, kFiles));
  open_all(s, slice(e1, 0, 10));
  for (size_t i = 0; i < kFiles; ++i) {
    CHECK(s.next_use(e1[i]) == (i < 10 ? kNever : kFiles + i));
  }
  open_all(s, slice(e1, 10, kFiles));
  CHECK_FALSE(s.view(0).active);
  // A new epoch after a gap continues the timeline.
  publish(s, "a", std::nullopt, e0);
  CHECK(s.view(0).epoch == 2);
  CHECK(s.next_use(e0[3]) == 2 * kFiles + 3);
}

TEST_CASE("next_use matches a brute-force model on random in-order traces", "[schedule]") {
  // Epochs drawn with replacement from a pool: some files repeat within an epoch, some are
  // missing. Opens in order, so the model is simple: the smallest timeline position at or
  // after the head that holds the file.
  constexpr FileId kPool = 40;
  constexpr size_t kEpochLength = 60;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    Schedule s;
    Files timeline;
    for (int e = 0; e < 3; ++e) {
      Files order(kEpochLength);
      for (auto& f : order) {
        f = rng() % kPool;
      }
      publish(s, "a", std::nullopt, order);
      timeline.insert(timeline.end(), order.begin(), order.end());
    }
    for (size_t head = 0; head <= timeline.size(); ++head) {
      INFO("head " << head);
      for (FileId f = 0; f < kPool + 2; ++f) {
        uint64_t want = kNever;
        for (size_t t = head; t < timeline.size(); ++t) {
          if (timeline[t] == f) {
            want = t;
            break;
          }
        }
        REQUIRE(s.next_use(f) == want);
      }
      if (head < timeline.size()) {
        const auto m = s.on_open(timeline[head]);
        REQUIRE(m.has_value());
        REQUIRE_FALSE(m->new_epoch);
      }
    }
    CHECK_FALSE(s.view(0).active);
  }
}

TEST_CASE("with two streams next_use is the minimum over streams", "[schedule]") {
  Schedule s;
  const Files fwd = range(0, 10);
  Files rev = fwd;
  std::reverse(rev.begin(), rev.end());
  CHECK(publish(s, "a", std::nullopt, fwd).stream == 0);
  CHECK(publish(s, "b", std::nullopt, rev).stream == 1);
  CHECK(publish(s, "b", std::nullopt, {42}).stream == 1);
  for (FileId f = 0; f < 10; ++f) {
    CHECK(s.next_use(f) == std::min<uint64_t>(f, 9 - f));
  }
  CHECK(s.next_use(42) == 10);  // only in stream b
  // An open goes to the stream where the file is nearest its head.
  open_all(s, {0, 1}, 0);
  open_all(s, {9}, 1);
  CHECK(s.view(0).position == 2);
  CHECK(s.view(1).position == 1);
  // Heads 2 and 1: values are (t - head) + the mean head (1), minimised over streams.
  // b holds f at 9 - f; a holds f at f.
  CHECK(s.next_use(0) == (9 - 0 - 1) + 1);  // consumed in a; b's occurrence
  CHECK(s.next_use(2) == (2 - 2) + 1);      // a's head is on it
  CHECK(s.next_use(8) == (9 - 8 - 1) + 1);  // b's head is on it
  CHECK(s.next_use(5) == std::min<uint64_t>(5 - 2, 9 - 5 - 1) + 1);
  CHECK(s.next_use(9) == (9 - 2) + 1);  // consumed in b; a's occurrence
  CHECK(s.next_use(42) == (10 - 1) + 1);
  // Streams with disjoint files: each open moves only its own stream.
  Schedule t;
  publish(t, "x", std::nullopt, {1, 2, 3});
  publish(t, "y", std::nullopt, {4, 5, 6});
  open_all(t, {4, 5}, 1);
  open_all(t, {1}, 0);
  CHECK(t.view(0).position == 1);
  CHECK(t.view(1).position == 2);
}

TEST_CASE("the schedule holds about 8 bytes per entry and 8 per file", "[schedule]") {
  constexpr size_t kFiles = 100000;
  // Ids in order of first appearance (how the registry numbers a first order), and shuffled.
  for (const bool in_order : {false, true}) {
    INFO((in_order ? "ids in order" : "ids shuffled"));
    Schedule s;
    const Files files = in_order ? range(0, kFiles) : shuffled(range(0, kFiles), 3);
    publish(s, "a", std::nullopt, files);
    CHECK(s.entries_held() == kFiles);
    CHECK(s.files_tracked() == kFiles);
    const uint64_t model = 8 * s.entries_held() + 8 * s.files_tracked();
    const uint64_t slack = model / 100 + 4096;
    CHECK(s.memory_bytes() >= model);
    CHECK(s.memory_bytes() <= model + slack);

    publish(s, "a", std::nullopt, shuffled(range(0, kFiles), 4));
    CHECK(s.entries_held() == 2 * kFiles);
    CHECK(s.memory_bytes() <= 8 * s.entries_held() + 8 * s.files_tracked() + slack);
    // Retiring an epoch gives its entries back.
    open_all(s, files);
    CHECK(s.entries_held() == kFiles);
    CHECK(s.memory_bytes() <= 8 * s.entries_held() + 8 * s.files_tracked() + slack);
  }
}

TEST_CASE("a dropped stream's epochs and next uses go, and its slot is reused", "[schedule]") {
  Schedule s;
  publish(s, "a", 0, {1, 2, 3});
  publish(s, "b", 0, {3, 4});
  CHECK(s.entries_held() == 5);
  s.drop_stream(0);
  CHECK_FALSE(s.stream_live(0));
  CHECK(s.entries_held() == 2);
  CHECK(s.next_use(1) == kNever);
  CHECK(s.on_open(2) == std::nullopt);
  CHECK(s.find_stream("a") == std::nullopt);
  // b still works, and file 3's next use is b's alone.
  CHECK(s.next_use(3) != kNever);
  CHECK(s.on_open(3)->stream == 1);
  // A new stream takes the free slot, starting from nothing.
  auto p = publish(s, "c", std::nullopt, {7});
  CHECK(p.stream == 0);
  CHECK(p.new_stream);
  CHECK(p.epoch == 0);
  CHECK(s.view(0).id == "c");
  CHECK(s.stream_count() == 2);
  CHECK(publish(s, "c", std::nullopt, {8}).new_stream == false);
}

}  // namespace epochfs::prefetch
