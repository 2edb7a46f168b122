#include "fusefs/inode_table.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::fusefs {
namespace {

struct stat make_stat(ino_t ino, dev_t dev = 1) {
  struct stat st = {};
  st.st_ino = ino;
  st.st_dev = dev;
  return st;
}

}  // namespace

TEST_CASE("the root is present and never forgotten", "[inode_table]") {
  InodeTable table(make_stat(2));
  CHECK(table.size() == 1);
  CHECK(table.path_of(kRootInodeId) == "");
  CHECK(table.forget(kRootInodeId, 100));
  CHECK(table.path_of(kRootInodeId) == "");
}

TEST_CASE("lookup counts are honoured exactly by forget", "[inode_table]") {
  InodeTable table(make_stat(2));
  const InodeId a = table.add_reference(make_stat(10), "a");
  CHECK(table.add_reference(make_stat(10), "a") == a);
  CHECK(table.add_reference(make_stat(10), "a") == a);
  CHECK(table.lookup_count(a) == 3);
  CHECK(table.forget(a, 2));
  CHECK(table.path_of(a) == "a");
  CHECK(table.forget(a, 1));
  CHECK_FALSE(table.path_of(a).has_value());
  CHECK(table.size() == 1);
  CHECK_FALSE(table.forget(a, 1));  // unknown id: reported, not a crash
}

TEST_CASE("one file reached by two names shares an entry", "[inode_table]") {
  InodeTable table(make_stat(2));
  const InodeId a = table.add_reference(make_stat(10), "dir/a");
  const InodeId b = table.add_reference(make_stat(10), "dir/hardlink");
  CHECK(a == b);
  CHECK(table.path_of(a) == "dir/hardlink");
  // Same inode number on another device is another file.
  CHECK(table.add_reference(make_stat(10, 2), "mnt/a") != a);
}

TEST_CASE("ids are not reused while the kernel holds them", "[inode_table]") {
  InodeTable table(make_stat(2));
  const InodeId a = table.add_reference(make_stat(10), "a");
  table.forget(a, 1);
  const InodeId b = table.add_reference(make_stat(11), "b");
  CHECK(b != a);
  CHECK(b != kRootInodeId);
}

TEST_CASE("a million lookups and forgets do not grow the table", "[inode_table]") {
  InodeTable table(make_stat(2));
  for (int i = 0; i < 1000000; ++i) {
    const ino_t ino = 100 + static_cast<ino_t>(i % 16);
    const InodeId id = table.add_reference(make_stat(ino), "f" + std::to_string(ino));
    if (i % 3 == 0) {
      table.add_reference(make_stat(ino), "f" + std::to_string(ino));
      table.forget(id, 2);
    } else {
      table.forget(id, 1);
    }
    REQUIRE(table.size() <= 2);
  }
  CHECK(table.size() == 1);
}

TEST_CASE("note_version says whether the file changed since the last open", "[inode_table]") {
  InodeTable table(make_stat(2));
  const InodeId a = table.add_reference(make_stat(10), "a");
  const FileVersion v1{100, 5, 6};
  const FileVersion v2{100, 5, 7};         // same size and mtime, new ctime: touch -r, cp -p
  CHECK_FALSE(table.note_version(a, v1));  // first open: nothing cached to keep
  CHECK(table.note_version(a, v1));
  CHECK_FALSE(table.note_version(a, v2));
  CHECK(table.note_version(a, v2));
}

TEST_CASE("a file changed since it was opened gets a new node", "[inode_table]") {
  InodeTable table(make_stat(2));
  struct stat st = make_stat(10);
  st.st_size = 100;
  const InodeId a = table.add_reference(st, "a");
  CHECK(table.add_reference(st, "a") == a);  // never opened: same node whatever it holds
  table.note_version(a, FileVersion::of(st));
  CHECK(table.add_reference(st, "a") == a);  // opened, unchanged
  st.st_size = 200;
  const InodeId b = table.add_reference(st, "a");
  CHECK(b != a);
  CHECK(table.lookup_count(b) == 1);
  // The old node lives until the kernel forgets it, and its forget leaves the new one alone.
  CHECK(table.path_of(a) == "a");
  CHECK(table.forget(a, 3));
  CHECK_FALSE(table.path_of(a).has_value());
  CHECK(table.add_reference(st, "a") == b);
  CHECK(table.lookup_count(b) == 2);
}

TEST_CASE("a table the kernel mostly let go of shrinks once per fall", "[inode_table]") {
  InodeTable table(make_stat(2));
  std::vector<InodeId> ids;
  for (ino_t ino = 10; ino < 10010; ++ino) {
    ids.push_back(table.add_reference(make_stat(ino), "f" + std::to_string(ino)));
  }
  CHECK_FALSE(table.shrink_if_mostly_forgotten());  // all still held
  for (size_t i = 0; i < 7000; ++i) {
    table.forget(ids[i], 1);
  }
  CHECK_FALSE(table.shrink_if_mostly_forgotten());  // 3,001 of 10,001: not below a quarter
  for (size_t i = 7000; i < 9000; ++i) {
    table.forget(ids[i], 1);
  }
  CHECK(table.shrink_if_mostly_forgotten());
  CHECK_FALSE(table.shrink_if_mostly_forgotten());  // once per fall
  CHECK(table.size() == 1001);
  CHECK(table.path_of(ids[9500]) == "f9510");  // what is held is kept
}

}  // namespace epochfs::fusefs
