// BlockCopies (prefetch/block_copies.h): open copies kept to a bound, least recently read
// first out, each unpinned once, when it has left the set and its last reader is done.
#include "prefetch/block_copies.h"

#include <fcntl.h>

#include <map>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

cachestore::FileVersion version(int64_t mtime) { return {100, mtime, mtime, 1, 1}; }

BlockCopies::Copy copy_of(cachestore::FileId id, int64_t mtime = 1) {
  return {id, version(mtime), cachestore::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC))};
}

TEST_CASE("past the bound the least recently read copy is let go and unpinned", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  BlockCopies copies(2, [&](cachestore::FileId id) { ++unpinned[id]; });
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
  BlockCopies copies(1, [&](cachestore::FileId id) { ++unpinned[id]; });
  auto reading = copies.hold(copy_of(1));
  copies.hold(copy_of(2));  // 1 leaves the set while read
  CHECK(unpinned.empty());
  reading.reset();
  CHECK(unpinned == std::map<cachestore::FileId, int>{{1, 1}});
}

TEST_CASE("a copy of another version is let go, and forget lets go too", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  {
    BlockCopies copies(4, [&](cachestore::FileId id) { ++unpinned[id]; });
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

}  // namespace
}  // namespace epochfs::prefetch
