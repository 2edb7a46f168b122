// The arithmetic of a READ served from a cached copy (fusefs/copy_read.h).
#include "fusefs/copy_read.h"

#include <catch2/catch.hpp>

namespace epochfs::fusefs {
namespace {

TEST_CASE("a read expects the bytes its file has from its offset", "[copy_read]") {
  CHECK(bytes_expected(100, 0, 4096) == 100);
  CHECK(bytes_expected(100, 40, 50) == 50);
  CHECK(bytes_expected(100, 90, 50) == 10);
  CHECK(bytes_expected(100, 100, 50) == 0);  // at the end
  CHECK(bytes_expected(100, 150, 50) == 0);  // past it
  CHECK(bytes_expected(0, 0, 4096) == 0);
}

TEST_CASE("a pipe holds a read if its pages fit, counting an unaligned start", "[copy_read]") {
  constexpr size_t kDefaultPipe = 16 * kPipePage;  // Linux's default pipe size
  CHECK(pipe_holds(kDefaultPipe, 0, kDefaultPipe));
  CHECK_FALSE(pipe_holds(kDefaultPipe, 0, kDefaultPipe + 1));
  // 64 KiB from offset 1 touches 17 pages.
  CHECK_FALSE(pipe_holds(kDefaultPipe, 1, kDefaultPipe));
  CHECK(pipe_holds(kDefaultPipe, 1, kDefaultPipe - kPipePage));
  CHECK(pipe_holds(1 << 20, 4095, 128 * 1024));
  CHECK_FALSE(pipe_holds(0, 0, 1));  // no pipe could be had
}

}  // namespace
}  // namespace epochfs::fusefs
