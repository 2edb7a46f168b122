#include "prefetch/file_registry.h"

#include <string>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {

TEST_CASE("the registry hands out dense ids, one per path", "[registry]") {
  FileRegistry r;
  CHECK(r.id_of("a/b") == 0);
  CHECK(r.id_of("a/c") == 1);
  CHECK(r.id_of("a/b") == 0);
  CHECK(r.path_of(1) == "a/c");
  CHECK(r.path_of(7).empty());
  CHECK(r.size() == 2);
}

TEST_CASE("the registry finds every path again after its index grew", "[registry]") {
  FileRegistry r;
  constexpr uint32_t kFiles = 200000;
  for (uint32_t i = 0; i < kFiles; ++i) {
    REQUIRE(r.id_of("n" + std::to_string(i % 1000) + "/f" + std::to_string(i)) == i);
  }
  for (uint32_t i = 0; i < kFiles; i += 7) {
    const std::string path = "n" + std::to_string(i % 1000) + "/f" + std::to_string(i);
    REQUIRE(r.id_of(path) == i);
    REQUIRE(r.path_of(i) == path);
  }
  CHECK(r.size() == kFiles);
}

TEST_CASE("paths of any length are kept whole", "[registry]") {
  FileRegistry r;
  const std::string longer(3 << 20, 'x');  // longer than an arena chunk
  const FileId a = r.id_of("short");
  const FileId b = r.id_of(longer);
  CHECK(r.path_of(b) == longer);
  CHECK(r.id_of(longer) == b);
  CHECK(r.id_of("short") == a);
  CHECK(r.path_of(r.id_of("after")) == "after");
}

TEST_CASE("observed versions are trusted only since the given time", "[registry]") {
  FileRegistry r;
  const FileId id = r.id_of("f");
  CHECK_FALSE(r.observed_since(id, 0).has_value());
  FileVersion v;
  v.size = 10;
  r.observe(id, v, 100);
  CHECK(r.observed_since(id, 100) == v);
  CHECK_FALSE(r.observed_since(id, 101).has_value());
}

}  // namespace epochfs::prefetch
