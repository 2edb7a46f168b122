#include "cachestore/disk_watch.h"

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

constexpr int64_t kStuckNs = 50'000'000;  // 50 ms

void outlive_the_limit() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

TEST_CASE("a call older than the limit makes the disk hung until it ends", "[disk_watch]") {
  DiskWatch watch(kStuckNs);
  CHECK_FALSE(watch.hung());
  std::optional<DiskWatch::Op> op;
  op.emplace(watch.begin());
  CHECK_FALSE(watch.hung());
  outlive_the_limit();
  CHECK(watch.hung());
  op.reset();
  CHECK_FALSE(watch.hung());
}

TEST_CASE("calls that end in time never make the disk hung", "[disk_watch]") {
  DiskWatch watch(kStuckNs);
  for (int i = 0; i < 1000; ++i) {
    const DiskWatch::Op op = watch.begin();
  }
  outlive_the_limit();
  CHECK_FALSE(watch.hung());
}

TEST_CASE("more calls than slots: the extra ones run unwatched, the verdict still comes",
          "[disk_watch]") {
  DiskWatch watch(kStuckNs);
  std::vector<DiskWatch::Op> ops;
  for (int i = 0; i < 1000; ++i) {
    ops.push_back(watch.begin());
  }
  outlive_the_limit();
  CHECK(watch.hung());
  ops.clear();
  CHECK_FALSE(watch.hung());
  // Every slot was given back.
  std::optional<DiskWatch::Op> op;
  op.emplace(watch.begin());
  outlive_the_limit();
  CHECK(watch.hung());
}

}  // namespace
}  // namespace epochfs::cachestore
