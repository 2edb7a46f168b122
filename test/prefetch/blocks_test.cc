// Blocks of range orders (prefetch/blocks.h): keys no source path can have, ranges parsed
// strictly, and a block's version following its file's.
#include "prefetch/blocks.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("a block key names its file and block, and never a real path", "[blocks]") {
  CHECK(block_key("a/b.h5", 7) == "a/b.h5//7");
  auto b = parse_block_key("a/b.h5//7");
  REQUIRE(b.has_value());
  CHECK(b->path == "a/b.h5");
  CHECK(b->block == 7);
  // Normalised relative paths (what lookups and orders register) hold no "//".
  CHECK_FALSE(parse_block_key("a/b.h5").has_value());
  CHECK_FALSE(parse_block_key("a/7").has_value());
  CHECK_FALSE(parse_block_key("a/b.h5//").has_value());
  CHECK_FALSE(parse_block_key("a//x").has_value());
  CHECK_FALSE(parse_block_key("//3").has_value());
}

TEST_CASE("a range is OFFSET LENGTH PATH within bounds", "[blocks]") {
  const char* why = "";
  auto r = parse_range("  1048575 2  dir/file name.npy", &why);
  REQUIRE(r.has_value());
  CHECK(r->offset == 1048575);
  CHECK(r->length == 2);
  CHECK(r->path == "dir/file name.npy");
  CHECK(r->first_block() == 0);
  CHECK(r->last_block() == 1);  // it crosses the first block's end
  CHECK(format_range(r->offset, r->length, r->path) == "1048575 2 dir/file name.npy");
  for (const char* bad : {"", "12", "12 4", "12 4 ", "x 4 f", "12 y f", "-1 4 f", "+1 4 f",
                          "12 0 f", "12 1073741825 f", "4611686018427387904 1 f"}) {
    INFO(bad);
    CHECK_FALSE(parse_range(bad, &why).has_value());
  }
  CHECK(parse_range("0 1073741824 f", &why).has_value());  // 1 GiB, the most
}

TEST_CASE("a block's version is its file's, with the block's length", "[blocks]") {
  cachestore::FileVersion file{static_cast<int64_t>(2 * kBlockBytes + 10), 5, 6, 7, 8};
  CHECK(block_version(file, 0).size == static_cast<int64_t>(kBlockBytes));
  CHECK(block_version(file, 2).size == 10);
  CHECK(block_version(file, 3).size == 0);
  auto changed = file;
  changed.mtime_ns = 9;
  CHECK_FALSE(block_version(changed, 0) == block_version(file, 0));
}

}  // namespace
}  // namespace epochfs::prefetch
