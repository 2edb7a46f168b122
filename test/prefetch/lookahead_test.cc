// The staging window (prefetch/lookahead.h): each --lookahead form, the auto formula before
// and after measurements, and the cap at half the cache.
#include "prefetch/lookahead.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

using Kind = Lookahead::Kind;

TEST_CASE("a number of files is the window, 0 turns prefetch off", "[lookahead]") {
  WindowInputs in;
  CHECK(window_files({Kind::kFiles, 500}, in) == 500);
  CHECK(window_files({Kind::kFiles, 0}, in) == 0);
}

TEST_CASE("a size is divided by the mean file size, a small file's before any copy",
          "[lookahead]") {
  WindowInputs in;
  CHECK(window_files({Kind::kBytes, 128 * 1024 * 10}, in) == 10);  // 128 KiB assumed
  in.mean_file_bytes = 1000;
  CHECK(window_files({Kind::kBytes, 1'000'000}, in) == 1000);
  in.mean_file_bytes = 0;  // only empty files so far: never a division by 0
  CHECK(window_files({Kind::kBytes, 1'000}, in) == 1000);
  in.mean_file_bytes = 1e9;  // a size smaller than one file: still one
  CHECK(window_files({Kind::kBytes, 1}, in) == 1);
}

TEST_CASE("auto covers twice a copy's time of reads plus a copy per thread", "[lookahead]") {
  WindowInputs in;
  in.stage_threads = 8;
  // Nothing measured: two copies per thread.
  CHECK(window_files({}, in) == 16);
  in.rate_files_s = 1000;
  in.copy_latency_s = 0.05;  // 2 x 1000/s x 50 ms = 100, plus 8
  CHECK(window_files({}, in) == 108);
  in.copy_latency_s = 0.001;  // 2 + 8 < 16: the floor
  CHECK(window_files({}, in) == 16);
}

TEST_CASE("the window is at most half the cache", "[lookahead]") {
  WindowInputs in;
  in.cache_capacity = 100 * 1000;
  in.mean_file_bytes = 1000;  // 100 files fit: 50 may be planned ahead
  CHECK(window_files({Kind::kFiles, 500}, in) == 50);
  CHECK(window_files({Kind::kFiles, 20}, in) == 20);
  in.cache_capacity = 10;  // not even one file: still one
  CHECK(window_files({Kind::kFiles, 500}, in) == 1);
}

}  // namespace
}  // namespace epochfs::prefetch
