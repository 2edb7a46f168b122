// BlockCopies (prefetch/block_copies.h): open copies kept to a bound, least recently read
// first out, each unpinned once, when it has left the set and its last reader is done; each
// read ahead when held and when found again a while later.
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
  BlockCopies copies(
      2, [&](cachestore::FileId id) { ++unpinned[id]; }, [](const BlockCopies::Copy&) {});
  copies.hold(copy_of(1), 0);
  copies.hold(copy_of(2), 0);
  CHECK(copies.find(1, version(1), 0) != nullptr);  // 1 read last: 2 is the oldest
  copies.hold(copy_of(3), 0);
  CHECK(copies.find(2, version(1), 0) == nullptr);
  CHECK(unpinned == std::map<cachestore::FileId, int>{{2, 1}});
  CHECK(copies.find(1, version(1), 0) != nullptr);
  CHECK(copies.find(3, version(1), 0) != nullptr);
}

TEST_CASE("a copy still being read is unpinned when its reader is done", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  BlockCopies copies(
      1, [&](cachestore::FileId id) { ++unpinned[id]; }, [](const BlockCopies::Copy&) {});
  auto reading = copies.hold(copy_of(1), 0);
  copies.hold(copy_of(2), 0);  // 1 leaves the set while read
  CHECK(unpinned.empty());
  reading.reset();
  CHECK(unpinned == std::map<cachestore::FileId, int>{{1, 1}});
}

TEST_CASE("a copy of another version is let go, and forget lets go too", "[blocks]") {
  std::map<cachestore::FileId, int> unpinned;
  {
    BlockCopies copies(
        4, [&](cachestore::FileId id) { ++unpinned[id]; }, [](const BlockCopies::Copy&) {});
    copies.hold(copy_of(1, 1), 0);
    copies.hold(copy_of(2, 1), 0);
    CHECK(copies.find(1, version(2), 0) == nullptr);  // the source changed
    CHECK(copies.find(1, version(1), 0) == nullptr);  // and it is gone
    copies.forget(2);
    CHECK(unpinned == std::map<cachestore::FileId, int>{{1, 1}, {2, 1}});
    copies.hold(copy_of(3), 0);
  }
  CHECK(unpinned[3] == 1);  // the set's end unpins what it holds
}

TEST_CASE("a copy is read ahead when held, and when found again a while later", "[blocks]") {
  int read_aheads = 0;
  BlockCopies copies(
      4, [](cachestore::FileId) {}, [&](const BlockCopies::Copy&) { ++read_aheads; });
  const int64_t later = BlockCopies::kReadAheadNs;
  copies.hold(copy_of(1), 0);
  CHECK(read_aheads == 1);
  CHECK(copies.find(1, version(1), later - 1) != nullptr);  // its pages were asked for just now
  CHECK(read_aheads == 1);
  CHECK(copies.find(1, version(1), later) != nullptr);  // they may have been reclaimed since
  CHECK(read_aheads == 2);
  CHECK(copies.find(1, version(1), later + 1) != nullptr);
  CHECK(read_aheads == 2);
  CHECK(copies.find(2, version(1), 3 * later) == nullptr);  // nothing held: nothing read
  CHECK(read_aheads == 2);
}

}  // namespace
}  // namespace epochfs::prefetch
