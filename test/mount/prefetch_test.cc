// Prefetch by the published order, through real mounts: publishing through the control
// directory and `epochfs publish`, bad orders, staging ahead of a paced reader over slow
// storage (epochfs-slowfs), one source open per file, the next epoch staged early, an order
// replaced mid-epoch, two streams, and known-future eviction against the Belady optimum.
// Assertions are on counts, never on times; every byte read is checked against the source.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <list>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/dataset.h"
#include "tools/lab/read_bench.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

using Order = std::vector<int>;  // file numbers, in access order

constexpr uint64_t kFileBytes = 32 * 1024;

std::string name_of(int i) { return "d" + std::to_string(i % 8) + "/f" + std::to_string(i); }

void make_files(const std::string& root, int count, uint64_t size = kFileBytes) {
  for (int i = 0; i < count; ++i) {
    const std::string path = root + "/" + name_of(i);
    fs::create_directories(fs::path(path).parent_path());
    REQUIRE(tools::write_content_file(path, static_cast<uint64_t>(i), 1, size).is_ok());
  }
}

Order shuffled(int first, int count, uint32_t seed) {
  Order order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), first);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

std::string order_text(const Order& order, const std::string& header = "") {
  std::string text = header;
  for (int i : order) {
    text += name_of(i) + "\n";
  }
  return text;
}

std::string text_of(const Mount& mount, const std::string& key) {
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  return doc->values[key];
}

// Waits until no copy is queued or running.
void wait_idle(const Mount& mount) {
  for (int i = 0; i < 2000 && stat_of(mount, "cache.copies_queued") > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(stat_of(mount, "cache.copies_queued") == 0);
}

// wait_idle for 100 ms on end: right after a publish with no reader, or between two of the
// planner's batches, the queue is empty for a moment only.
void wait_settled(const Mount& mount) {
  int idle_looks = 0;
  for (int i = 0; i < 1000 && idle_looks < 5; ++i) {
    idle_looks = stat_of(mount, "cache.copies_queued") == 0 ? idle_looks + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(idle_looks == 5);
}

// Waits until the planner has handed out `lead` entries past the stream's position and no copy
// has been queued or running for 100 ms: every file among them is cached now (or was found
// missing). A count, not a clock, says when the reader may come.
void wait_window_staged(const Mount& mount, double lead, const std::string& stream = "default") {
  const std::string key = "prefetch.streams." + stream + ".lead_files";
  int idle_looks = 0;
  for (int i = 0; i < 1000 && idle_looks < 5; ++i) {
    const bool done = stat_of(mount, key) >= lead && stat_of(mount, "cache.copies_queued") == 0;
    idle_looks = done ? idle_looks + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO(stream << ": " << stat_of(mount, key) << " entries handed out of " << lead);
  REQUIRE(idle_looks == 5);
}

// Reads the files of order through the mount with `threads` workers taking them in order (so
// opens arrive slightly out of order, like DataLoader workers), each pausing `pause` after a
// file; checks every byte. Returns the number of files read wrong or not at all.
int read_order(const Mount& mount, const std::string& source, const Order& order, int threads,
               std::chrono::microseconds pause) {
  std::atomic<size_t> next{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t k = next++; k < order.size(); k = next++) {
        const std::string rel = name_of(order[k]);
        auto got = tools::file_digest(mount / rel);
        auto want = tools::file_digest(source + "/" + rel);
        if (!got.is_ok() || !want.is_ok() || got.value() != want.value()) {
          ++bad;
        }
        std::this_thread::sleep_for(pause);
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  return bad.load();
}

// Hits of the best possible cache of `capacity` files over trace (Belady's MIN with bypass:
// on a miss, keep the file only if it is needed sooner than the cached file needed last).
uint64_t belady_hits(const Order& trace, size_t capacity) {
  std::vector<size_t> next_use(trace.size());
  std::unordered_map<int, size_t> seen;
  for (size_t t = trace.size(); t-- > 0;) {
    auto it = seen.find(trace[t]);
    next_use[t] = it == seen.end() ? SIZE_MAX : it->second;
    seen[trace[t]] = t;
  }
  std::unordered_map<int, size_t> cached;  // file -> its next use
  uint64_t hits = 0;
  for (size_t t = 0; t < trace.size(); ++t) {
    const int f = trace[t];
    if (cached.count(f) != 0) {
      ++hits;
      cached[f] = next_use[t];
      continue;
    }
    if (cached.size() < capacity) {
      cached[f] = next_use[t];
      continue;
    }
    auto far = std::max_element(cached.begin(), cached.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    if (next_use[t] < far->second) {
      cached.erase(far);
      cached[f] = next_use[t];
    }
  }
  return hits;
}

uint64_t lru_hits(const Order& trace, size_t capacity) {
  std::list<int> recency;  // front: most recent
  std::unordered_map<int, std::list<int>::iterator> where;
  uint64_t hits = 0;
  for (int f : trace) {
    auto it = where.find(f);
    if (it != where.end()) {
      ++hits;
      recency.erase(it->second);
    } else if (where.size() == capacity) {
      where.erase(recency.back());
      recency.pop_back();
    }
    recency.push_front(f);
    where[f] = recency.begin();
  }
  return hits;
}

}  // namespace

TEST_CASE("orders are published through .epochfs/ and epochfs publish", "[mount][prefetch]") {
  TempDir dir;
  make_files(dir / "src", 20);
  Mount mount(dir / "src", dir / "mnt");

  SECTION("a valid order with bad entries is published without them") {
    const std::string text =
        "#count 7\n#epoch 2\n" + order_text({0, 1, 2, 3}) + "../escape\n/etc/passwd\nd0/\xff\xfe\n";
    CHECK(publish(mount, text) == 0);
    CHECK(stat_of(mount, "prefetch.publishes") == 1);
    CHECK(stat_of(mount, "prefetch.last_publish.accepted") == 4);
    CHECK(stat_of(mount, "prefetch.last_publish.rejected") == 3);
    CHECK(text_of(mount, "prefetch.last_publish.rejected_examples.1").find("line 7") !=
          std::string::npos);
    CHECK(stat_of(mount, "prefetch.streams.default.epoch") == 2);
    CHECK(stat_of(mount, "prefetch.streams.default.epoch_length") == 4);
  }
  SECTION("a plain list with no header is accepted, CRLF too") {
    CHECK(publish(mount, "d0/f0\r\nd1/f1\r\n\r\n# a comment\nd2/f2\n") == 0);
    CHECK(stat_of(mount, "prefetch.last_publish.accepted") == 3);
  }
  SECTION("an order cut short of its #count is refused whole") {
    CHECK(publish(mount, "#count 10\n" + order_text({0, 1, 2})) == EINVAL);
    CHECK(stat_of(mount, "prefetch.publish_failures") == 1);
    CHECK(stat_of(mount, "prefetch.schedule_entries") == 0);
  }
  SECTION("junk, empty files and huge lines are refused and reads go on") {
    CHECK(publish(mount, std::string("\0\1\2\3\xff", 5)) == EINVAL);
    CHECK(publish(mount, std::string(1 << 20, 'a')) == EINVAL);
    // An empty file is refused when released, after its close returned (see
    // Filesystem::flush): the close cannot say so.
    CHECK(publish(mount, "") == 0);
    for (int i = 0; i < 500 && stat_of(mount, "prefetch.publish_failures") < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(stat_of(mount, "prefetch.publish_failures") == 3);
    CHECK(read_order(mount, dir / "src", shuffled(0, 20, 1), 2, {}) == 0);
  }
  SECTION("epochfs publish sets the epoch and the stream") {
    std::ofstream(dir / "order.txt") << order_text(shuffled(0, 20, 2));
    auto r = run_epochfs(
        {"publish", mount.path(), dir / "order.txt", "--epoch", "5", "--stream", "rank1"});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("stream rank1 epoch 5: 20 entries published") != std::string::npos);
    CHECK(stat_of(mount, "prefetch.streams.rank1.epoch") == 5);
  }
  SECTION("epochfs publish says when most entries name no file") {
    // The order's paths relative to the wrong directory: published, but nothing to stage.
    std::string wrong;
    for (int i = 0; i < 20; ++i) {
      wrong += "nope/" + name_of(i) + "\n";
    }
    std::ofstream(dir / "wrong.txt") << wrong;
    auto r = run_epochfs({"publish", mount.path(), dir / "wrong.txt"});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("0 of 16 entries looked up name a file") != std::string::npos);
    CHECK(r.output.find("warning") != std::string::npos);
    CHECK(stat_of(mount, "prefetch.last_publish.looked_up") == 16);
    CHECK(stat_of(mount, "prefetch.last_publish.found") == 0);
    auto strict = run_epochfs({"publish", mount.path(), dir / "wrong.txt", "--strict"});
    CHECK(strict.exit_code == 1);
    CHECK(strict.output.find("error") != std::string::npos);
    // A good order says nothing more, and looked up what it published.
    std::ofstream(dir / "good.txt") << order_text(shuffled(0, 20, 4));
    auto good = run_epochfs({"publish", mount.path(), dir / "good.txt", "--strict"});
    CHECK(good.exit_code == 0);
    CHECK(good.output.find("looked up") == std::string::npos);
    CHECK(stat_of(mount, "prefetch.last_publish.found") == 16);
  }
  SECTION("epochfs publish of a cut-short file fails with the reason") {
    std::ofstream(dir / "short.txt") << "#count 3\nd0/f0\n";
    auto r = run_epochfs({"publish", mount.path(), dir / "short.txt"});
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("count") != std::string::npos);
  }
  SECTION("an index-form order names files of the manifest") {
    CHECK(publish(mount, "#form indices\n0\n", "early") == EINVAL);  // no manifest yet
    CHECK(publish(mount, order_text({5, 6, 7}), "manifest") == 0);
    CHECK(stat_of(mount, "prefetch.manifest_entries") == 3);
    CHECK(publish(mount, "#form indices\n#count 4\n2\n0\n3\nx\n") == 0);
    CHECK(stat_of(mount, "prefetch.last_publish.accepted") == 2);
    CHECK(stat_of(mount, "prefetch.last_publish.rejected") == 2);  // 3 is past the end; x
    CHECK(read_order(mount, dir / "src", {7, 5}, 1, {}) == 0);
    CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.opens") == 2);
  }
  SECTION("writes outside .epochfs/ still fail with EROFS") {
    const int fd = ::open((mount / "new").c_str(), O_WRONLY | O_CREAT, 0600);
    CHECK(fd < 0);
    CHECK(errno == EROFS);
  }
}

TEST_CASE("the mount's reorder window sets how far behind an open may match its stream",
          "[mount][prefetch]") {
  TempDir dir;
  make_files(dir / "src", 100, 1000);
  Order order(100);
  std::iota(order.begin(), order.end(), 0);
  // Files 10..39 skipped: 30 entries, more than a window of 16, fewer than the default.
  Order read = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int i = 40; i < 100; ++i) {
    read.push_back(i);
  }
  for (const auto& [args, matched] :
       {std::pair{std::vector<std::string>{"--reorder-window", "16"}, 70.0},
        std::pair{std::vector<std::string>{}, 71.0}}) {
    Mount mount(dir / "src", dir / "mnt", args);
    REQUIRE(publish(mount, order_text(order)) == 0);
    REQUIRE(read_order(mount, dir / "src", read, 1, {}) == 0);
    REQUIRE(read_order(mount, dir / "src", {12}, 1, {}) == 0);  // a straggler, 88 behind
    INFO(args.size());
    CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.opens") == matched);
  }
}

TEST_CASE("the file named by --shuffle-file is published at each new version",
          "[mount][prefetch]") {
  TempDir dir;
  make_files(dir / "src", 20);
  const std::string watched = dir / "orders/order.txt";
  fs::create_directories(dir / "orders");
  std::ofstream(watched) << order_text(shuffled(0, 20, 1), "#epoch 0\n");
  Mount mount(dir / "src", dir / "mnt", {"--shuffle-file", watched});
  // Each new version is written beside the file and renamed onto it (an atomic replace).
  const auto replace = [&](const std::string& text) {
    std::ofstream(dir / "orders/.order.tmp") << text;
    fs::rename(dir / "orders/.order.tmp", watched);
  };
  const auto wait_publishes = [&](double n) {
    for (int i = 0; i < 1000 && stat_of(mount, "prefetch.publishes") < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return stat_of(mount, "prefetch.publishes");
  };
  CHECK(wait_publishes(1) == 1);  // the version present at mount
  CHECK(stat_of(mount, "prefetch.streams.default.epoch_length") == 20);
  replace(order_text(shuffled(0, 20, 2), "#epoch 1\n"));
  CHECK(wait_publishes(2) == 2);
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 1);
  replace("#count 20\n" + order_text({0, 1}));  // cut short: refused, the orders stay
  CHECK(wait_publishes(3) == 3);
  CHECK(stat_of(mount, "prefetch.publish_failures") == 1);
  CHECK(stat_of(mount, "prefetch.schedule_entries") == 40);
}

TEST_CASE("a paced reader over slow storage is served from the cache", "[mount][prefetch]") {
  // The reader is paced by staging, not by a clock: it reads each window of the order once
  // the planner has copied it, the window past where the reader is. Every open is then a hit
  // and every file was copied ahead of the reader, whatever the timing. The hit rate of a
  // trainer that does not wait is a figure, measured in docs/benchmarks.md ("A trainer over
  // shared storage").
  constexpr int kFiles = 300;
  constexpr int kLookahead = 32;
  TempDir dir;
  make_files(dir / "src", kFiles);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt", {"--lookahead", std::to_string(kLookahead)});
  const Order order = shuffled(0, kFiles, 7);
  REQUIRE(publish(mount, order_text(order)) == 0);

  for (int from = 0; from < kFiles; from += kLookahead) {
    const int to = std::min(kFiles, from + kLookahead);
    wait_window_staged(mount, to - from);
    INFO("entries " << from << " to " << to);
    CHECK(read_order(mount, dir / "src", Order(order.begin() + from, order.begin() + to), 4, {}) ==
          0);
  }
  CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.opens") == kFiles);
  CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.hits") == kFiles);
  CHECK(stat_of(mount, "prefetch.prefetches") == kFiles);
  CHECK(stat_of(mount, "cache.files_staged") == kFiles);
  // The reader never opened a file on the source: the copies did, once each.
  CHECK(slow.opens() == kFiles);
}

TEST_CASE("the copies in flight follow a slow link, not the thread count", "[mount][prefetch]") {
  // A link of 20 MB/s passes ~200 files of 100 KB a second, and a copy alone takes ~6 ms: a
  // few copies fill it. A fixed two per stage thread (256) split it 128 ways, so the copy a
  // reader waited for finished as late as the 128th. Counted: the most copies seen running, and
  // every file staged from one source open.
  constexpr int kFiles = 300;
  constexpr int kFew = 32;
  TempDir dir;
  make_files(dir / "src", kFiles, 100'000);
  SlowSource slow(dir / "src", dir / "slow", 1, 64, {"--bandwidth-mbs", "20"});
  Mount mount(slow.path(), dir / "mnt", {"--lookahead", std::to_string(kFiles)});
  REQUIRE(publish(mount, order_text(shuffled(0, kFiles, 3))) == 0);
  double most_in_flight = 0;
  for (int i = 0; i < 3000 && stat_of(mount, "cache.files_staged") < kFiles; ++i) {
    most_in_flight = std::max(most_in_flight, stat_of(mount, "cache.copies_in_flight"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(stat_of(mount, "cache.files_staged") == kFiles);
  CHECK(most_in_flight > 0);
  CHECK(most_in_flight <= kFew);
  CHECK(stat_of(mount, "cache.copy_limit") <= kFew);
  CHECK(slow.opens() == kFiles);
}

TEST_CASE("a reader that runs into the copies ahead opens each file on the source once",
          "[mount][prefetch]") {
  // The same reader not waiting for staging: its opens meet copies ahead queued, running or
  // done, in whatever mix the timing gives. Whichever it is, each file is read from the
  // source once and copied once, and every open counts in the stream.
  constexpr int kFiles = 300;
  TempDir dir;
  make_files(dir / "src", kFiles);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt");
  const Order order = shuffled(0, kFiles, 7);
  REQUIRE(publish(mount, order_text(order)) == 0);

  CHECK(read_order(mount, dir / "src", order, 4, std::chrono::milliseconds(4)) == 0);
  CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.opens") == kFiles);
  CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.hits") +
            stat_of(mount, "prefetch.streams.default.this_epoch.misses") ==
        kFiles);
  wait_idle(mount);
  CHECK(stat_of(mount, "cache.files_staged") == kFiles);
  // Prefetch copies and the reader never both open a file on the source.
  INFO("aborted " << stat_of(mount, "cache.copies_aborted") << ", stale "
                  << stat_of(mount, "cache.dropped_stale") << ", waits " << stat_of(mount, "waits")
                  << ", misses " << stat_of(mount, "misses") << ", staged "
                  << stat_of(mount, "cache.files_staged"));
  CHECK(slow.opens() == kFiles);
}

TEST_CASE("the next epoch published early is staged before the current one ends",
          "[mount][prefetch]") {
  TempDir dir;
  make_files(dir / "src", 200);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt", {"--lookahead", "40"});
  const Order first = shuffled(0, 100, 1);
  const Order second = shuffled(100, 100, 2);
  REQUIRE(publish(mount, order_text(first, "#epoch 0\n")) == 0);
  REQUIRE(publish(mount, order_text(second, "#epoch 1\n")) == 0);
  CHECK(read_order(mount, dir / "src", first, 2, std::chrono::milliseconds(2)) == 0);
  // The window past the end of epoch 0 is epoch 1's first 40 entries.
  wait_window_staged(mount, 40);
  // Staging crossed the boundary: the start of epoch 1 is on local disk before it is opened.
  for (int k = 0; k < 20; ++k) {
    INFO("entry " << k);
    CHECK(slow.opens(name_of(second[static_cast<size_t>(k)])) == 1);
  }
  const double hits_before = stat_of(mount, "hits");
  CHECK(read_order(mount, dir / "src", Order(second.begin(), second.begin() + 20), 1, {}) == 0);
  CHECK(stat_of(mount, "hits") - hits_before == 20);
  CHECK(stat_of(mount, "prefetch.streams.default.epoch") == 1);
}

// Waits until the daemon has stat'ed at least n cached files ahead of the reader.
void wait_stats_ahead(const Mount& mount, double n) {
  for (int i = 0; i < 2000 && stat_of(mount, "source_stats_ahead") < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(stat_of(mount, "source_stats_ahead") >= n);
}

// Epoch 0 read whole (everything cached), the kernel's entries dropped, and once the
// attributes the copies read are older than half the attribute timeout, epoch 1 published:
// the daemon stats the cached files again ahead of the reader.
void cache_epoch_and_publish_next(const Mount& mount, const std::string& src, const Order& first,
                                  const Order& second, std::chrono::milliseconds attr_timeout) {
  REQUIRE(publish(mount, order_text(first, "#epoch 0\n")) == 0);
  CHECK(read_order(mount, src, first, 2, {}) == 0);
  wait_idle(mount);
  std::this_thread::sleep_for(attr_timeout / 2 + std::chrono::milliseconds(100));
  REQUIRE(tools::drop_page_cache());  // the kernel forgets its entries: lookups come again
  REQUIRE(publish(mount, order_text(second, "#epoch 1\n")) == 0);
  wait_stats_ahead(mount, static_cast<double>(second.size()));
}

// A mount over a slowed source whose files were all read once (cached), with the next epoch
// published and its files stat'ed ahead of the reader, within a 3 s attribute timeout.
struct StatedAhead {
  static constexpr int kFiles = 100;
  TempDir dir;
  SlowSource slow{with_files(dir / "src"), dir / "slow", 1};
  Mount mount{slow.path(), dir / "mnt", {"--attr-timeout", "3", "--lookahead", "100"}};
  const Order second = shuffled(0, kFiles, 2);

  StatedAhead() {
    cache_epoch_and_publish_next(mount, dir / "src", shuffled(0, kFiles, 1), second,
                                 std::chrono::seconds(3));
  }

  static std::string with_files(const std::string& src) {
    make_files(src, kFiles);
    return src;
  }
};

TEST_CASE("lookups of cached files just ahead of the reader do not wait for the source",
          "[mount][prefetch]") {
  StatedAhead t;
  const double answered = stat_of(t.mount, "lookups_answered_ahead");
  const double checks = stat_of(t.mount, "source_version_checks");
  const double hits = stat_of(t.mount, "hits");
  CHECK(read_order(t.mount, t.dir / "src", t.second, 2, {}) == 0);
  CHECK(stat_of(t.mount, "lookups_answered_ahead") - answered >= StatedAhead::kFiles);
  CHECK(stat_of(t.mount, "hits") - hits == StatedAhead::kFiles);
  CHECK(stat_of(t.mount, "source_version_checks") == checks);
}

TEST_CASE("a stat of a cached file just ahead of the reader does not wait for the source",
          "[mount][prefetch]") {
  StatedAhead t;
  // AT_STATX_FORCE_SYNC makes the kernel send a GETATTR after the path walk's LOOKUP: both
  // answered from the attributes read ahead.
  const double answered = stat_of(t.mount, "lookups_answered_ahead");
  for (const int i : t.second) {
    struct statx stx = {};
    const std::string path = t.mount / name_of(i);
    REQUIRE(::statx(AT_FDCWD, path.c_str(), AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &stx) == 0);
    CHECK(stx.stx_size == std::filesystem::file_size(t.dir / ("src/" + name_of(i))));
  }
  CHECK(stat_of(t.mount, "lookups_answered_ahead") - answered >= 2 * StatedAhead::kFiles);
}

TEST_CASE("a listing asks the source for no entry's attributes", "[mount][prefetch]") {
  constexpr int kFiles = 40;
  TempDir dir;
  make_files(dir / "src", kFiles);
  SlowSource slow(dir / "src", dir / "slow", 1);
  Mount mount(slow.path(), dir / "mnt", {});
  // The kernel lists with readdirplus: an entry answered with attributes gets a node. None of
  // these files was read, so none has attributes at hand, and the listing names them only.
  const double inodes = stat_of(mount, "inodes");
  int listed = 0;
  for (int d = 0; d < 8; ++d) {
    for (const auto& e : fs::directory_iterator(mount / ("d" + std::to_string(d)))) {
      listed += e.is_regular_file() ? 1 : 0;  // d_type, no stat
    }
  }
  CHECK(listed == kFiles);
  CHECK(stat_of(mount, "inodes") - inodes <= 8);  // the directories walked to, no file
  CHECK(fs::file_size(mount / name_of(3)) == fs::file_size(dir / ("src/" + name_of(3))));
}

TEST_CASE("attributes read ahead are not trusted past the attribute timeout", "[mount][prefetch]") {
  constexpr int kFiles = 20;
  TempDir dir;
  make_files(dir / "src", kFiles);
  SlowSource slow(dir / "src", dir / "slow", 1);
  Mount mount(slow.path(), dir / "mnt", {"--attr-timeout", "1", "--lookahead", "100"});
  const Order second = shuffled(0, kFiles, 2);
  cache_epoch_and_publish_next(mount, dir / "src", shuffled(0, kFiles, 1), second,
                               std::chrono::seconds(1));

  // Changed in the source after its attributes were read ahead, and read after the timeout:
  // the new bytes, not the cached copy of the old ones.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string rel = name_of(second[0]);
  REQUIRE(tools::write_content_file(dir / ("src/" + rel), 999, 2, kFileBytes + 4096).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // slowfs's own entry timeout
  const double answered = stat_of(mount, "lookups_answered_ahead");
  auto got = read_file(mount / rel);
  auto want = read_file(dir / ("src/" + rel));
  REQUIRE(got.has_value());
  REQUIRE(want.has_value());
  CHECK(got->size() == kFileBytes + 4096);
  CHECK(*got == *want);
  CHECK(stat_of(mount, "lookups_answered_ahead") == answered);
}

TEST_CASE("an order replaced mid-epoch is followed from its start", "[mount][prefetch]") {
  constexpr int kFiles = 200;
  TempDir dir;
  make_files(dir / "src", kFiles);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt", {"--lookahead", "32"});
  const Order a = shuffled(0, kFiles, 3);
  REQUIRE(publish(mount, order_text(a, "#epoch 0\n")) == 0);
  CHECK(read_order(mount, dir / "src", Order(a.begin(), a.begin() + 50), 2,
                   std::chrono::milliseconds(2)) == 0);
  const Order b = shuffled(0, kFiles, 4);
  REQUIRE(publish(mount, order_text(b, "#epoch 0\n")) == 0);
  CHECK(text_of(mount, "prefetch.last_publish.message").find("replacing") != std::string::npos);
  // b is read window by window, each once staged: the planner copies b's windows from b's
  // first entry on, so every open of b is a hit (paced by counts, not by a clock).
  const double hits_before = stat_of(mount, "hits");
  for (int from = 0; from < kFiles; from += 32) {
    const int to = std::min(kFiles, from + 32);
    wait_window_staged(mount, to - from);
    INFO("entries " << from << " to " << to << " of b");
    CHECK(read_order(mount, dir / "src", Order(b.begin() + from, b.begin() + to), 2, {}) == 0);
  }
  CHECK(stat_of(mount, "hits") - hits_before == kFiles);
  wait_idle(mount);
  CHECK(slow.opens() == kFiles);  // the cache holds everything: nothing read twice
}

TEST_CASE("two streams are staged side by side", "[mount][prefetch]") {
  TempDir dir;
  make_files(dir / "src", 200);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt", {"--lookahead", "32"});
  const Order a = shuffled(0, 100, 5);
  const Order b = shuffled(100, 100, 6);
  REQUIRE(publish(mount, order_text(a, "#stream rank0\n"), "a") == 0);
  REQUIRE(publish(mount, order_text(b, "#stream rank1\n"), "b") == 0);
  // Both ranks read at once, window by window, each once both windows are staged (paced by
  // counts, not by a clock): the planner serves the two side by side, so every open is a hit.
  for (int from = 0; from < 100; from += 32) {
    const int to = std::min(100, from + 32);
    wait_window_staged(mount, to - from, "rank0");
    wait_window_staged(mount, to - from, "rank1");
    INFO("entries " << from << " to " << to);
    int bad_a = 0, bad_b = 0;
    std::thread ta([&] {
      bad_a = read_order(mount, dir / "src", Order(a.begin() + from, a.begin() + to), 2, {});
    });
    std::thread tb([&] {
      bad_b = read_order(mount, dir / "src", Order(b.begin() + from, b.begin() + to), 2, {});
    });
    ta.join();
    tb.join();
    CHECK(bad_a == 0);
    CHECK(bad_b == 0);
  }
  for (const std::string s : {"rank0", "rank1"}) {
    INFO(s);
    CHECK(stat_of(mount, "prefetch.streams." + s + ".this_epoch.opens") == 100);
    CHECK(stat_of(mount, "prefetch.streams." + s + ".this_epoch.hits") == 100);
    CHECK(stat_of(mount, "prefetch.streams." + s + ".this_epoch.prefetches") == 100);
  }
  wait_idle(mount);
  CHECK(slow.opens() == 200);
}

TEST_CASE("with half the dataset cached, known-future eviction is near the Belady optimum",
          "[mount][prefetch]") {
  constexpr int kFiles = 200;
  constexpr size_t kCapacityFiles = kFiles / 2;
  TempDir dir;
  make_files(dir / "src", kFiles);
  // --lookahead 0: no prefetch, so the hits measure the eviction and admission policy alone.
  Mount mount(dir / "src", dir / "mnt",
              {"--lookahead", "0", "--cache-size", std::to_string(kCapacityFiles * kFileBytes)});
  Order trace;
  for (uint32_t e = 0; e < 3; ++e) {
    const Order order = shuffled(0, kFiles, 10 + e);
    REQUIRE(publish(mount, order_text(order, "#epoch " + std::to_string(e) + "\n")) == 0);
    trace.insert(trace.end(), order.begin(), order.end());
  }
  for (int f : trace) {
    CHECK(read_order(mount, dir / "src", {f}, 1, {}) == 0);
    wait_idle(mount);  // each miss's copy lands before the next open, as in the model
  }
  const double hits = stat_of(mount, "hits");
  const auto best = static_cast<double>(belady_hits(trace, kCapacityFiles));
  const auto lru = static_cast<double>(lru_hits(trace, kCapacityFiles));
  INFO("epochfs " << hits << ", Belady " << best << ", LRU " << lru << " of " << trace.size());
  CHECK(hits >= best - 0.02 * static_cast<double>(trace.size()));
  CHECK(hits >= lru + 0.1 * static_cast<double>(trace.size()));
  CHECK(stat_of(mount, "cache.used_bytes") <= kCapacityFiles * kFileBytes);
}

TEST_CASE("entries naming no file are skipped and counted, the others followed",
          "[mount][prefetch][input]") {
  // docs/reliability.md I2: an order whose entries name missing files (a stale list, another
  // dataset's names) at 0.1%, 50% and 100% of its lines. Each such entry is counted as rejected
  // when the planner reaches it; the files that exist are still staged ahead of the reader.
  TempDir dir;
  constexpr int kEntries = 1000;
  constexpr int kLookahead = 64;
  make_files(dir / "src", kEntries, 4096);
  Mount mount(dir / "src", dir / "mnt", {"--lookahead", std::to_string(kLookahead)});
  const int missing_per_mille = GENERATE(1, 500, 1000);
  std::string text;
  Order present;
  int missing = 0;
  for (int k = 0; k < kEntries; ++k) {
    // Missing entries spread evenly through the order.
    if ((k * missing_per_mille) / kEntries != ((k + 1) * missing_per_mille) / kEntries) {
      text += "gone/" + std::to_string(k) + "\n";
      ++missing;
    } else {
      text += name_of(k) + "\n";
      present.push_back(k);
    }
  }
  INFO(missing << " of " << kEntries << " entries name no file");
  REQUIRE(publish(mount, text) == 0);
  CHECK(stat_of(mount, "prefetch.last_publish.accepted") == kEntries);
  // Paced by staging, not by a clock: the files that exist among the entries of each window
  // past the reader's position are read once the window is staged.
  for (size_t next = 0, head = 0; next < present.size();) {
    wait_window_staged(mount, std::min<double>(kLookahead, kEntries - head));
    Order window;
    for (; next < present.size() && present[next] < static_cast<int>(head) + kLookahead; ++next) {
      window.push_back(present[next]);
    }
    REQUIRE_FALSE(window.empty());  // the missing entries are spread: never a window of them
    INFO("entries " << head << " to " << window.back());
    CHECK(read_order(mount, dir / "src", window, 2, {}) == 0);
    head = static_cast<size_t>(window.back()) + 1;
  }
  // With every entry missing nothing was read, and the planner may not have reached one yet.
  for (int i = 0; i < 500 && stat_of(mount, "prefetch.streams.default.rejected_entries") == 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  wait_settled(mount);
  const double rejected = stat_of(mount, "prefetch.streams.default.rejected_entries");
  CHECK(rejected > 0);
  CHECK(rejected <= missing);
  // Hits: the files that exist were staged before the reader came, every one.
  CHECK(stat_of(mount, "prefetch.streams.default.this_epoch.hits") == present.size());
  // Nothing was left waiting: a file outside the order reads at once, with its bytes.
  check_same(mount / name_of(0), dir / ("src/" + name_of(0)));
}

TEST_CASE("a window whose entries all name no file is tried in full without a reader",
          "[mount][prefetch][input]") {
  // A rejected entry ends its prefetch without a copy; its slot must start the next pass at
  // once, not at the planner's idle poll. The copy limit starts below the window, so the window
  // takes several passes, and staging counts as settled only when all of it was tried.
  TempDir dir;
  constexpr int kLookahead = 64;
  make_files(dir / "src", 1, 4096);
  Mount mount(dir / "src", dir / "mnt", {"--lookahead", std::to_string(kLookahead)});
  std::string text;
  for (int k = 0; k < 4 * kLookahead; ++k) {
    text += "gone/" + std::to_string(k) + "\n";
  }
  REQUIRE(publish(mount, text) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "prefetch.streams.default.rejected_entries") == kLookahead);
}

TEST_CASE("the --shuffle-file watcher publishes whole versions only", "[mount][prefetch]") {
  // docs/reliability.md I12 on a local directory, where inotify sees every close and rename.
  TempDir dir;
  make_files(dir / "src", 20);
  const std::string watched = dir / "orders/order.txt";
  fs::create_directories(dir / "orders");
  std::ofstream(watched) << order_text(shuffled(0, 20, 1), "#epoch 0\n");
  Mount mount(dir / "src", dir / "mnt", {"--shuffle-file", watched, "--log-file", dir / "log"});
  const auto publishes_reach = [&](double n) {
    for (int i = 0; i < 500 && stat_of(mount, "prefetch.publishes") < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return stat_of(mount, "prefetch.publishes") == n;
  };
  REQUIRE(publishes_reach(1));

  // Rewritten in place, slowly: truncated at open, half the lines, a pause, the rest. Only the
  // close publishes, and what it publishes is whole.
  const std::string text = order_text(shuffled(0, 20, 2), "#epoch 0\n");
  {
    cachestore::UniqueFd fd(::open(watched.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
    REQUIRE(fd.valid());
    REQUIRE(::write(fd.get(), text.data(), text.size() / 2) > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CHECK(stat_of(mount, "prefetch.publishes") == 1);
    const size_t rest = text.size() - text.size() / 2;
    REQUIRE(::write(fd.get(), text.data() + text.size() / 2, rest) == static_cast<ssize_t>(rest));
  }
  CHECK(publishes_reach(2));
  CHECK(stat_of(mount, "prefetch.streams.default.epoch_length") == 20);

  // Deleted: nothing happens, the order stays. Made again: published.
  fs::remove(watched);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(stat_of(mount, "prefetch.publishes") == 2);
  std::ofstream(dir / "orders/.tmp") << order_text(shuffled(0, 20, 3), "#epoch 1\n");
  fs::rename(dir / "orders/.tmp", watched);
  CHECK(publishes_reach(3));

  // Swapped for a symlink: not followed (the daemon may be root; the link could name any
  // file), said once in the log, and the orders stay. A file renamed back is published.
  std::ofstream(dir / "elsewhere.txt") << order_text(shuffled(0, 20, 4), "#epoch 2\n");
  fs::create_symlink(dir / "elsewhere.txt", dir / "orders/.link");
  fs::rename(dir / "orders/.link", watched);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(stat_of(mount, "prefetch.publishes") == 3);
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 1);
  CHECK(contains(read_file(dir / "log").value_or(""), "is a symlink, which is not followed"));
  std::ofstream(dir / "orders/.tmp") << order_text(shuffled(0, 20, 5), "#epoch 2\n");
  fs::rename(dir / "orders/.tmp", watched);
  CHECK(publishes_reach(4));
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 2);
  CHECK(stat_of(mount, "prefetch.publish_failures") == 0);

  // Waiting costs nothing: on a local directory the watcher sleeps on inotify alone and never
  // looks at the file on a timer, as it does where inotify is blind (the next test). The
  // daemon's CPU time is not measured here: that would be a benchmark's figure.
  CHECK_FALSE(contains(read_file(dir / "log").value_or(""), "where inotify misses changes"));
}

TEST_CASE("a --shuffle-file changed where inotify cannot see is published once it is whole",
          "[mount][prefetch]") {
  // docs/reliability.md I12: the shuffle file on a FUSE filesystem (faultfs standing for NFS),
  // changed in the directory behind it, as by another machine: inotify is blind to that, so
  // the watcher looks at the file every second and publishes a version once it has stayed
  // the same from one look to the next. A writer that stops mid-file for longer is caught by
  // #count: refused, the order before it stays.
  TempDir dir;
  make_files(dir / "src", 20);
  fs::create_directories(dir / "backing");
  std::ofstream(dir / "backing/order.txt") << order_text(shuffled(0, 20, 1), "#epoch 0\n");
  FaultFs orders(dir / "backing", dir / "orders");
  Mount mount(dir / "src", dir / "mnt",
              {"--shuffle-file", dir / "orders/order.txt", "--log-file", dir / "log"});
  const auto wait_for = [&](const std::string& key, double n) {
    for (int i = 0; i < 1000 && stat_of(mount, key) < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return stat_of(mount, key) == n;
  };
  REQUIRE(wait_for("prefetch.publishes", 1));
  CHECK(contains(read_file(dir / "log").value_or(""), "where inotify misses changes"));

  std::ofstream(dir / "backing/.tmp") << order_text(shuffled(0, 20, 2), "#epoch 1\n");
  fs::rename(dir / "backing/.tmp", dir / "backing/order.txt");
  CHECK(wait_for("prefetch.publishes", 2));  // within 10 s; a look every second
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 1);

  const std::string text = order_text(shuffled(0, 20, 3), "#epoch 2\n#count 20\n");
  {
    std::ofstream out(dir / "backing/order.txt", std::ios::trunc);
    out << text.substr(0, text.size() / 2) << std::flush;
    CHECK(wait_for("prefetch.publish_failures", 1));  // the half: refused by its #count
    out << text.substr(text.size() / 2);
  }
  CHECK(wait_for("prefetch.publishes", 4));
  CHECK(stat_of(mount, "prefetch.publish_failures") == 1);
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 2);
}

}  // namespace epochfs::test
