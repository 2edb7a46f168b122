// FreshAttrs: attributes come back only for the file they were read for, and only if they
// were read at or after the time asked; a file sharing a slot takes it over.
#include "prefetch/fresh_attrs.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

struct stat attrs_of_size(off_t size) {
  struct stat st {};

  st.st_size = size;
  st.st_mode = S_IFREG | 0644;
  return st;
}

TEST_CASE("fresh attributes are returned only when read recently enough", "[fresh_attrs]") {
  FreshAttrs fresh(8);
  CHECK_FALSE(fresh.get(3, 0).has_value());
  fresh.put(3, attrs_of_size(42), 1000);
  REQUIRE(fresh.get(3, 1000).has_value());
  CHECK(fresh.get(3, 1000)->st_size == 42);
  CHECK(fresh.get(3, 0).has_value());
  CHECK_FALSE(fresh.get(3, 1001).has_value());  // read before the oldest time trusted
  CHECK_FALSE(fresh.get(4, 0).has_value());     // never read
}

TEST_CASE("a file sharing a slot takes it over", "[fresh_attrs]") {
  FreshAttrs fresh(8);
  fresh.put(3, attrs_of_size(1), 10);
  fresh.put(11, attrs_of_size(2), 20);  // 11 % 8 == 3
  CHECK_FALSE(fresh.get(3, 0).has_value());
  REQUIRE(fresh.get(11, 0).has_value());
  CHECK(fresh.get(11, 0)->st_size == 2);
  fresh.put(11, attrs_of_size(5), 30);  // a newer read of the same file replaces the older
  CHECK(fresh.get(11, 25)->st_size == 5);
}

}  // namespace
}  // namespace epochfs::prefetch
