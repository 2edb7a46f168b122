// The passthrough open table's rules per inode (fusefs/passthrough_opens.h), with the kernel's
// registration replaced by a counter: one backing file per inode shared by its passthrough
// opens, none while it is open in cached mode, unregistered with its last passthrough open.
#include "fusefs/passthrough_opens.h"

#include <set>

#include <catch2/catch.hpp>

namespace epochfs::fusefs::passthrough {
namespace {

const cachestore::FileVersion kV1{100, 1, 1, 1, 1};
const cachestore::FileVersion kV2{200, 2, 2, 2, 1};

struct FakeKernel {
  uint32_t next_id = 1;
  bool refuse = false;
  std::set<uint32_t> registered;
  OpenTable table{[this](int, bool) {
                    if (refuse) {
                      return uint32_t{0};
                    }
                    registered.insert(next_id);
                    return next_id++;
                  },
                  [this](uint32_t id) { registered.erase(id); }};
};

TEST_CASE("the opens of an inode share one backing file, closed with the last", "[passthrough]") {
  FakeKernel k;
  const Opened a = k.table.begin(7, 10, Backing::kCopy, kV1, true);
  const Opened b = k.table.begin(7, 11, Backing::kCopy, kV1, true);
  CHECK(a.backing_id != 0);
  CHECK(b.backing_id == a.backing_id);
  CHECK(k.registered.size() == 1);
  CHECK(k.table.backing_files() == 1);
  k.table.end(7, a.backing_id);
  CHECK(k.registered.size() == 1);
  k.table.end(7, b.backing_id);
  CHECK(k.registered.empty());
  CHECK(k.table.backing_files() == 0);
}

TEST_CASE("a hit while a miss reads the source shares the source's backing file", "[passthrough]") {
  FakeKernel k;
  const Opened miss = k.table.begin(7, 10, Backing::kSource, kV1, true);
  REQUIRE(miss.backing_id != 0);
  CHECK(miss.reads_source);
  // The copy was made meanwhile: the kernel takes no second backing file for the inode.
  const Opened hit = k.table.begin(7, 11, Backing::kCopy, kV1, true);
  CHECK(hit.backing_id == miss.backing_id);
  CHECK(hit.reads_source);
  k.table.end(7, miss.backing_id);
  k.table.end(7, hit.backing_id);
  // With nothing open, the next open registers the copy.
  const Opened later = k.table.begin(7, 12, Backing::kCopy, kV1, true);
  CHECK_FALSE(later.reads_source);
  CHECK(later.backing_id != miss.backing_id);
}

TEST_CASE("an inode open in cached mode gets no passthrough open until those end",
          "[passthrough]") {
  FakeKernel k;
  const Opened classic = k.table.begin(7, 10, Backing::kNone, kV1, true);
  CHECK(classic.backing_id == 0);
  CHECK(k.table.begin(7, 11, Backing::kCopy, kV1, true).backing_id == 0);  // cached mode too
  CHECK(k.registered.empty());
  k.table.end(7, 0);
  k.table.end(7, 0);
  CHECK(k.table.begin(7, 12, Backing::kCopy, kV1, true).backing_id != 0);
}

TEST_CASE("a refused or forbidden registration makes a classic open", "[passthrough]") {
  FakeKernel k;
  k.refuse = true;
  CHECK(k.table.begin(7, 10, Backing::kCopy, kV1, true).backing_id == 0);
  k.refuse = false;
  CHECK(k.table.begin(8, 10, Backing::kCopy, kV1, false).backing_id == 0);  // passthrough disabled
  CHECK(k.table.begin(9, -1, Backing::kCopy, kV1, true).backing_id == 0);   // no file to back it
  CHECK(k.registered.empty());
  // Other inodes are not affected.
  CHECK(k.table.begin(10, 10, Backing::kCopy, kV1, true).backing_id != 0);
}

TEST_CASE("an open of another version than the backing file's is read through the daemon",
          "[passthrough]") {
  FakeKernel k;
  const Opened old_open = k.table.begin(7, 10, Backing::kCopy, kV1, true);
  REQUIRE(old_open.backing_id != 0);
  // A reopen of the same inode that found the file replaced: the kernel takes only the inode's
  // backing file now, so the open names it but has its reads sent to the daemon.
  const Opened new_open = k.table.begin(7, 11, Backing::kCopy, kV2, true);
  CHECK(new_open.backing_id == old_open.backing_id);
  CHECK(new_open.direct);
  CHECK_FALSE(new_open.reads_source);
  CHECK_FALSE(old_open.direct);
  CHECK(k.registered.size() == 1);
  k.table.end(7, old_open.backing_id);
  k.table.end(7, new_open.backing_id);
  CHECK(k.registered.empty());
  // With nothing open, the new version gets a backing file of its own.
  const Opened later = k.table.begin(7, 12, Backing::kCopy, kV2, true);
  CHECK(later.backing_id != 0);
  CHECK_FALSE(later.direct);
}

}  // namespace
}  // namespace epochfs::fusefs::passthrough
