// HeldFds (prefetch/held_fds.h): descriptors kept to a bound, least recently used first out,
// each released once, when it has left the set and its last user is done; and to an age.
#include "prefetch/held_fds.h"

#include <fcntl.h>

#include <map>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

cachestore::FileVersion version(int64_t mtime) { return {100, mtime, mtime, 1, 1}; }

HeldFds::Held copy_of(cachestore::FileId id, int64_t mtime = 1, int64_t opened_ns = 0) {
  return {id, version(mtime), cachestore::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)),
          opened_ns};
}

TEST_CASE("past the bound the least recently read copy is let go and unpinned", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  HeldFds copies(2, [&](cachestore::FileId id) { ++unpinned[id]; });
  copies.hold(copy_of(1));
  copies.hold(copy_of(2));
  CHECK(copies.find(1, version(1)) != nullptr);  // 1 read last: 2 is the oldest
  copies.hold(copy_of(3));
  CHECK(copies.find(2, version(1)) == nullptr);
  CHECK(unpinned == std::map<cachestore::FileId, int>{{2, 1}});
  CHECK(copies.find(1, version(1)) != nullptr);
  CHECK(copies.find(3, version(1)) != nullptr);
}

TEST_CASE("a copy still being read is unpinned when its reader is done", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  HeldFds copies(1, [&](cachestore::FileId id) { ++unpinned[id]; });
  auto reading = copies.hold(copy_of(1));
  copies.hold(copy_of(2));  // 1 leaves the set while read
  CHECK(unpinned.empty());
  reading.reset();
  CHECK(unpinned == std::map<cachestore::FileId, int>{{1, 1}});
}

TEST_CASE("a copy of another version is let go, and forget lets go too", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  {
    HeldFds copies(4, [&](cachestore::FileId id) { ++unpinned[id]; });
    copies.hold(copy_of(1, 1));
    copies.hold(copy_of(2, 1));
    CHECK(copies.find(1, version(2)) == nullptr);  // the source changed
    CHECK(copies.find(1, version(1)) == nullptr);  // and it is gone
    copies.forget(2);
    CHECK(unpinned == std::map<cachestore::FileId, int>{{1, 1}, {2, 1}});
    copies.hold(copy_of(3));
  }

  CHECK(unpinned[3] == 1);  // the set's end unpins what it holds
}

TEST_CASE("a source's open is shared, whatever its version, until it is too old", "[blocks]") {
  constexpr int64_t kAge = 1'000'000'000;
  HeldFds sources(2, nullptr, kAge);
  const int64_t t0 = 5 * kAge;
  auto opened = sources.hold(copy_of(7, 1, t0));
  CHECK(sources.find(7, std::nullopt, t0 + kAge) == opened);       // any version, within the age
  CHECK(sources.find(7, std::nullopt, t0 + kAge + 1) == nullptr);  // too old: opened again
  CHECK(sources.find(7, std::nullopt, t0) == nullptr);             // and let go
  CHECK(opened->fd.valid());  // a user still copying keeps its descriptor
}

}  // namespace
}  // namespace epochfs::prefetch
