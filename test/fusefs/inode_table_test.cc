#include "fusefs/inode_table.h"

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::fusefs {
namespace {

struct stat make_stat(ino_t ino, dev_t dev = 1) {
  struct stat st = {};
  st.st_ino = ino;
  st.st_dev = dev;
  st.st_nlink = 1;
  return st;
}

// A file with two names (hard links).
struct stat linked_stat(ino_t ino, dev_t dev = 1) {
  struct stat st = make_stat(ino, dev);
  st.st_nlink = 2;
  return st;
}

}  // namespace

TEST_CASE("the root is present and never forgotten", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  CHECK(table.size() == 1);
  CHECK(table.path_of(kRootInodeId) == "");
  CHECK(table.forget(kRootInodeId, 100));
  CHECK(table.path_of(kRootInodeId) == "");
}

TEST_CASE("lookup counts are honoured exactly by forget", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
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

// A NamesFile that answers from a fixed set of names still leading to the file.
InodeTable::NamesFile names(std::vector<std::string> linked, int* asked = nullptr) {
  return [linked = std::move(linked), asked](const std::string& other) {
    if (asked != nullptr) {
      ++*asked;
    }
    return std::find(linked.begin(), linked.end(), other) != linked.end();
  };
}

TEST_CASE("one file reached by two names shares an entry", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  int asked = 0;
  const InodeId a = table.add_reference(linked_stat(10), "dir/a", names({}, &asked));
  CHECK(asked == 0);  // a new node: nothing to check
  const InodeId b = table.add_reference(linked_stat(10), "dir/hardlink", names({"dir/a"}, &asked));
  CHECK(a == b);
  CHECK(asked == 1);
  CHECK(table.path_of(a) == "dir/hardlink");
  CHECK(table.lookup_count(a) == 2);
  CHECK(table.add_reference(linked_stat(10), "dir/hardlink", names({}, &asked)) == a);
  CHECK(asked == 1);  // the node's own name: no check
  // Same inode number on another device is another file.
  CHECK(table.add_reference(linked_stat(10, 2), "mnt/a") != a);
  // A file of one name found under another was renamed: a new node, and nothing to ask.
  const InodeId c = table.add_reference(make_stat(20), "dir/c", names({}, &asked));
  CHECK(table.add_reference(make_stat(20), "dir/d", names({"dir/c"}, &asked)) != c);
  CHECK(asked == 1);
}

TEST_CASE("files are told apart by device, a device the table never saw included",
          "[inode_table]") {
  // A node keeps its device as a number the table gives each device it meets.
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2, 7), registry);
  const InodeId a = table.add_reference(make_stat(10, 7), "a");
  const InodeId b = table.add_reference(make_stat(10, 9), "mnt/b");
  CHECK(a != b);
  const FileId name_a = registry.find("a").value();
  CHECK(table.node_of(name_a, FileVersion{0, 0, 0, 10, 7}) == a);
  CHECK(table.node_of(registry.find("mnt/b").value(), FileVersion{0, 0, 0, 10, 9}) == b);
  const FileId name_c = registry.id_of("c");  // no node: found by the key, if any
  CHECK_FALSE(table.node_of(name_c, FileVersion{0, 0, 0, 10, 8}).has_value());  // never seen
  const InodeId linked = table.add_reference(linked_stat(11, 9), "mnt/l");
  CHECK(table.node_of(name_c, FileVersion{0, 0, 0, 11, 9}) == linked);
  const FileVersion at_a{0, 0, 0, 10, 7};
  CHECK_FALSE(table.note_version(a, at_a));
  CHECK(table.note_version(a, at_a));
  // An open of a's name that found a file on a device no lookup met: another file.
  CHECK_FALSE(table.note_version(a, FileVersion{0, 0, 0, 10, 8}));
  CHECK_FALSE(table.note_version(a, at_a));
}

TEST_CASE("ids are not reused while the kernel holds them", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  const InodeId a = table.add_reference(make_stat(10), "a");
  table.forget(a, 1);
  const InodeId b = table.add_reference(make_stat(11), "b");
  CHECK(b != a);
  CHECK(b != kRootInodeId);
}

// No-open's leases and the control files' snapshots are kept by node id: an old id that named
// a new file would hand them the old file's state.
TEST_CASE("a forgotten node's id never names another node", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  std::vector<InodeId> forgotten;
  for (ino_t ino = 10; ino < 5000; ++ino) {
    const InodeId id = table.add_reference(make_stat(ino), "f" + std::to_string(ino));
    for (const InodeId old : forgotten) {
      REQUIRE(id != old);
    }
    if (ino % 2 == 0 && forgotten.size() < 200) {
      REQUIRE(table.forget(id, 1));
      forgotten.push_back(id);
    }
  }
  for (const InodeId old : forgotten) {
    CHECK_FALSE(table.path_of(old).has_value());
    CHECK(table.lookup_count(old) == 0);
    CHECK_FALSE(table.forget(old, 1));
  }
  CHECK(table.size() == 1 + 4990 - 200);
}

TEST_CASE("a million lookups and forgets do not grow the table", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
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
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  const InodeId a = table.add_reference(make_stat(10), "a");
  const FileVersion v1{100, 5, 6, 10, 1};
  const FileVersion v2{100, 5, 7, 10, 1};  // same size and mtime, new ctime: touch -r, cp -p
  CHECK_FALSE(table.note_version(a, v1));  // first open: nothing cached to keep
  CHECK(table.note_version(a, v1));
  CHECK_FALSE(table.note_version(a, v2));
  CHECK(table.note_version(a, v2));
  // The name opened another file (replaced between lookup and open): a change, every time,
  // and the node is not taken again for its own file even with the very same size and times.
  const FileVersion other{100, 5, 7, 11, 1};
  CHECK_FALSE(table.note_version(a, other));
  CHECK_FALSE(table.note_version(a, other));
  struct stat same = make_stat(10);
  same.st_size = 100;
  same.st_mtim = {0, 5};
  same.st_ctim = {0, 7};
  CHECK(table.add_reference(same, "a") != a);
}

TEST_CASE("a file changed since it was opened gets a new node", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
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

TEST_CASE("a new file given a deleted file's inode number gets a new node", "[inode_table]") {
  // ext4 and xfs hand a deleted file's number to the next file created. The kernel may still
  // hold the old name's node: were it reused, with its path rewritten, the old name would
  // lead to the new file.
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  struct stat old_file = make_stat(10);
  old_file.st_mode = S_IFREG | 0644;
  old_file.st_size = 1000;
  old_file.st_ctim = {100, 1};
  old_file.st_mtim = old_file.st_ctim;
  const InodeId a = table.add_reference(old_file, "a");  // stat'ed only, never opened
  struct stat new_file = old_file;
  new_file.st_size = 3000;
  new_file.st_ctim = {200, 2};
  new_file.st_mtim = new_file.st_ctim;
  const InodeId b = table.add_reference(new_file, "b");
  CHECK(b != a);
  CHECK(table.path_of(a) == "a");  // still the deleted name: it answers as deleted
  CHECK(table.path_of(b) == "b");
  CHECK(table.add_reference(new_file, "b") == b);
  CHECK(table.forget(a, 1));
  CHECK(table.add_reference(new_file, "b") == b);  // a's forget left b's key alone
  CHECK(table.lookup_count(b) == 3);
}

TEST_CASE("a file found under a name that no longer leads to its node's gets a new node",
          "[inode_table]") {
  // Renamed, or deleted and its number given to a new file, within one tick of the clock that
  // stamps ctime, so that size, mtime and ctime all match: the old name is asked about.
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  struct stat st = linked_stat(10);
  st.st_mode = S_IFREG | 0644;
  const InodeId a = table.add_reference(st, "a", names({}));
  int asked = 0;
  const InodeId b = table.add_reference(st, "b", names({}, &asked));
  CHECK(asked == 1);
  CHECK(b != a);
  CHECK(table.path_of(a) == "a");  // gone from the source: the old name answers as deleted
  CHECK(table.path_of(b) == "b");
  // The new node is the one later lookups find.
  CHECK(table.add_reference(st, "b", names({}, &asked)) == b);
  CHECK(asked == 1);
}

TEST_CASE("a file changed since its node saw it gets a new node, opened or not", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  struct stat st = make_stat(10);
  st.st_mode = S_IFREG | 0644;
  st.st_size = 100;
  const InodeId a = table.add_reference(st, "a");
  st.st_ctim.tv_nsec = 1;  // touch -r, cp -p: same size and mtime
  const InodeId changed = table.add_reference(st, "a");
  CHECK(changed != a);
  CHECK(table.add_reference(st, "a") == changed);
  // A version seen at open is the node's too: a lookup of that version keeps the node.
  st.st_size = 200;
  table.note_version(changed, FileVersion::of(st));
  CHECK(table.add_reference(st, "a") == changed);
  // Another type under the same number is another file.
  struct stat dir = st;
  dir.st_mode = S_IFDIR | 0755;
  CHECK(table.add_reference(dir, "a") != changed);
}

TEST_CASE("a directory keeps its node as its entries change and when renamed", "[inode_table]") {
  // The kernel gives a directory inode one name: it moves the old name's entry to the new one.
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  struct stat st = make_stat(10);
  st.st_mode = S_IFDIR | 0755;
  st.st_size = 4096;
  const InodeId d = table.add_reference(st, "d");
  st.st_mtim.tv_sec = st.st_ctim.tv_sec = 5;  // a file added in it
  st.st_size = 8192;
  CHECK(table.add_reference(st, "d") == d);
  int asked = 0;
  CHECK(table.add_reference(st, "e", names({}, &asked)) == d);
  CHECK(asked == 0);
  CHECK(table.path_of(d) == "e");
  CHECK(table.lookup_count(d) == 3);
}

TEST_CASE("the other name is checked without the lock, and a table changed meanwhile wins",
          "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  const InodeId a = table.add_reference(linked_stat(10), "a");
  InodeId during = 0;
  // While "x" waits for its check of "a", the kernel looks up "c" (which takes the key).
  const InodeId x = table.add_reference(linked_stat(10), "x", [&](const std::string& other) {
    CHECK(other == "a");
    during = table.add_reference(linked_stat(10), "c");
    return true;  // "a" still names it, but the node to reuse is no longer a
  });
  CHECK(during != a);
  CHECK(x != a);
  CHECK(x != during);
  CHECK(table.path_of(a) == "a");
  CHECK(table.path_of(during) == "c");
  CHECK(table.path_of(x) == "x");
}

TEST_CASE("an older node of a name outlives a shrink that cut its name's place off",
          "[inode_table]") {
  // The place a name has in the table's vector by path id is cut off by a shrink once no
  // node is its newest; an older node of the name is still held, and is forgotten later.
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
  std::vector<InodeId> others;
  for (ino_t ino = 10; ino < 5010; ++ino) {
    others.push_back(table.add_reference(make_stat(ino), "f" + std::to_string(ino)));
  }
  struct stat st = make_stat(9);
  const InodeId old_node = table.add_reference(st, "last");
  st.st_size = 1;  // changed: a new node takes the name
  const InodeId new_node = table.add_reference(st, "last");
  REQUIRE(new_node != old_node);
  CHECK(table.forget(new_node, 1));
  for (const InodeId id : others) {
    table.forget(id, 1);
  }
  CHECK(table.shrink_if_mostly_forgotten());
  CHECK(table.path_of(old_node) == "last");
  CHECK(table.forget(old_node, 1));
  CHECK(table.size() == 1);
  CHECK(table.add_reference(st, "last") != new_node);
}

TEST_CASE("a table the kernel mostly let go of shrinks once per fall", "[inode_table]") {
  prefetch::FileRegistry registry;
  InodeTable table(make_stat(2), registry);
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
  // Slots given back are made again, and their nodes get ids never used before.
  for (ino_t ino = 20000; ino < 29000; ++ino) {
    const InodeId id = table.add_reference(make_stat(ino), "g" + std::to_string(ino));
    REQUIRE(std::find(ids.begin(), ids.end(), id) == ids.end());
    REQUIRE(table.path_of(id) == "g" + std::to_string(ino));
  }
  CHECK(table.size() == 10001);
  for (size_t i = 9000; i < ids.size(); ++i) {
    CHECK(table.path_of(ids[i]) == "f" + std::to_string(i + 10));
  }
}

}  // namespace epochfs::fusefs
