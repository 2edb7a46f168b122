#include "prefetch/block_readers.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("a file is read by blocks only by the users whose live orders name it so", "[blocks]") {
  BlockReaders readers;
  CHECK_FALSE(readers.reads_by_blocks(7, 1000));
  readers.add(1000, {7, 9});
  CHECK(readers.reads_by_blocks(7, 1000));
  CHECK(readers.reads_by_blocks(9, 1000));
  CHECK_FALSE(readers.reads_by_blocks(7, 1001));    // another user
  CHECK_FALSE(readers.reads_by_blocks(8, 1000));    // another file
  CHECK(readers.reads_by_blocks(7, std::nullopt));  // one user's mount: any order counts
  CHECK_FALSE(readers.reads_by_blocks(8, std::nullopt));
  // Two orders of the user name file 7: it stays read by blocks until both are gone.
  readers.add(1000, {7});
  readers.remove(1000, {7, 9});
  CHECK(readers.reads_by_blocks(7, 1000));
  CHECK_FALSE(readers.reads_by_blocks(9, 1000));
  readers.remove(1000, {7});
  CHECK_FALSE(readers.reads_by_blocks(7, 1000));
  CHECK(readers.size() == 0);
}

TEST_CASE("the mount's own range orders are read by blocks by every user", "[blocks]") {
  BlockReaders readers;
  readers.add(BlockReaders::kAnyone, {3});
  CHECK(readers.reads_by_blocks(3, 0));
  CHECK(readers.reads_by_blocks(3, 1234));
  readers.remove(BlockReaders::kAnyone, {3});
  CHECK_FALSE(readers.reads_by_blocks(3, 1234));
  // Removing what was never added changes nothing.
  readers.remove(5, {3});
  CHECK(readers.size() == 0);
}

}  // namespace
}  // namespace epochfs::prefetch
