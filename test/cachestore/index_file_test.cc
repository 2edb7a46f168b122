#include "cachestore/index_file.h"

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

std::vector<KeptCopy> sample() {
  return {
      KeptCopy{"n01440764/n01440764_10026.JPEG", 110000, FileVersion{110000, 5, 6, 7, 8}, 0xabc},
      KeptCopy{"name with spaces/and\\backslash", 0, FileVersion{0, 1, 2, 3, 4}, 0},
      KeptCopy{"new\nline", 1, FileVersion{1, -1, 9, 10, 11}, ~uint64_t{0}},
  };
}

bool same(const KeptCopy& a, const KeptCopy& b) {
  return a.path == b.path && a.size == b.size && a.version == b.version && a.hash == b.hash;
}

}  // namespace

TEST_CASE("an index round-trips every field, whatever the path holds", "[index_file]") {
  const auto copies = sample();
  auto parsed = parse_index(format_index(copies));
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->size() == copies.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    CHECK(same((*parsed)[i], copies[i]));
  }
  auto empty = parse_index(format_index({}));
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
}

TEST_CASE("a cut-short, altered or foreign index is refused whole", "[index_file]") {
  const std::string text = format_index(sample());
  // Cut at every length: never accepted (a writer killed mid-file).
  for (size_t n = 0; n < text.size() - 1; ++n) {
    INFO("length " << n);
    CHECK_FALSE(parse_index(text.substr(0, n)).has_value());
  }
  // One byte changed anywhere.
  for (size_t i = 0; i < text.size(); i += 7) {
    std::string altered = text;
    altered[i] = altered[i] == 'x' ? 'y' : 'x';
    INFO("byte " << i);
    CHECK_FALSE(parse_index(altered).has_value());
  }
  CHECK_FALSE(parse_index("").has_value());
  CHECK_FALSE(parse_index("epochfs-cache-index 2\nend 0 0000000000000000\n").has_value());
}

}  // namespace epochfs::cachestore
