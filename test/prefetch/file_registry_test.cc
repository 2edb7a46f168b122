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

// Every open looks its path up under the registry's lock: one index of 16 M paths stalled
// them for ~1 s while it grew. Its tables grow one at a time, each a small share of the paths.
TEST_CASE("no growth of the registry's index rehashes more than a share of it", "[registry]") {
  FileRegistry r;
  constexpr uint32_t kFiles = 500000;
  for (uint32_t i = 0; i < kFiles; ++i) {
    r.id_of("n" + std::to_string(i % 1000) + "/f" + std::to_string(i));
  }
  CHECK(r.most_rehashed_at_once() > 0);
  CHECK(r.most_rehashed_at_once() <= kFiles / 100);
  CHECK(r.find("n7/f7") == 7u);
  CHECK(r.find("n7/f8") == std::nullopt);
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

TEST_CASE("the last observed attributes are kept, however old", "[registry]") {
  FileRegistry r;
  const FileId a = r.id_of("a");
  const FileId b = r.id_of("b");
  CHECK_FALSE(r.last_observed(a).has_value());
  struct stat st = {};
  st.st_mode = S_IFREG | 0640;
  st.st_uid = 1000;
  st.st_gid = 100;
  st.st_nlink = 1;
  st.st_size = 123;
  st.st_ino = 77;
  st.st_mtim = {1700000000, 5};
  st.st_ctim = {1700000001, 6};
  r.observe(a, st);
  st.st_size = 456;  // same shape: shared, not stored twice
  r.observe(b, st);
  auto got = r.last_observed(a);
  REQUIRE(got.has_value());
  CHECK(got->st_mode == (S_IFREG | 0640));
  CHECK(got->st_uid == 1000);
  CHECK(got->st_gid == 100);
  CHECK(got->st_size == 123);
  CHECK(got->st_ino == 77);
  CHECK(got->st_mtim.tv_sec == 1700000000);
  CHECK(got->st_mtim.tv_nsec == 5);
  CHECK(got->st_ctim.tv_nsec == 6);
  CHECK(r.last_observed(b)->st_size == 456);
}

}  // namespace epochfs::prefetch
