// KeptVersions: a kept copy's version is there until it is let go, and letting go of the
// last one frees the whole array (a mount keeps none once every kept copy was opened).
#include "cachestore/kept_versions.h"

#include <catch2/catch.hpp>

namespace epochfs::cachestore {

TEST_CASE("kept versions are held by id until let go", "[kept_versions]") {
  KeptVersions kept;
  kept.expect(1000);
  CHECK(kept.bytes() == 0);  // nothing reserved until a copy is adopted
  FileVersion v;
  v.size = 2048;
  kept.set(2000, FileVersion{});  // no version: nothing held
  CHECK(kept.size() == 0);
  for (FileId id = 0; id < 1000; ++id) {
    v.ino = id;
    kept.set(id, v);
  }
  kept.set(5, v);  // set again: still one
  CHECK(kept.size() == 1000);
  CHECK(kept.bytes() == 1000 * sizeof(FileVersion));  // reserved once, as expected
  REQUIRE(kept.get(7));
  CHECK(kept.get(7)->ino == 7);
  CHECK_FALSE(kept.get(1000));
  CHECK_FALSE(kept.get(UINT32_MAX - 1));
  kept.erase(7);
  kept.erase(7);       // twice: no effect
  kept.erase(123456);  // never held
  CHECK_FALSE(kept.get(7));
  CHECK(kept.size() == 999);
  for (FileId id = 0; id < 1000; ++id) {
    kept.erase(id);
  }
  CHECK(kept.size() == 0);
  CHECK(kept.bytes() == 0);  // let go whole
  CHECK_FALSE(kept.get(3));
  kept.set(3, v);  // usable again after being let go
  CHECK(kept.get(3));
}

}  // namespace epochfs::cachestore
