// The mount against an oracle: a read-only bind mount of the same source (docs/reliability.md rows
// P1, P2, P5, S1, S7). Every operation is made on both, and the mount must give what the
// oracle gives: the same attributes, listings, link targets, xattrs and access verdicts, the
// same errno for every write, the same bytes under hostile names and through links that leave
// the tree. overlay_test.cc checks the mount against the source itself; this file checks the
// cases where only a read-only view of the source says what the right answer is.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "test/mount/source_tree.h"
#include "tools/lab/read_bench.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;
using cachestore::UniqueFd;

// "ok" or the errno's name: failures then read "EROFS" == "EPERM", not 30 == 1.
std::string outcome(int err) {
  if (err == 0) {
    return "ok";
  }
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : "errno " + std::to_string(err);
}

int errno_of(long rc) { return rc < 0 ? errno : 0; }

int open_errno(const std::string& path, int flags) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
  return fd.valid() ? 0 : errno;
}

// A name as it can be printed in a failure: control bytes and bytes past ASCII as \xNN, so
// that NFC and NFD twins, or a name with a newline, are told apart.
std::string printable(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char hex[8];
      snprintf(hex, sizeof(hex), "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string at(const std::string& root, const std::string& rel) {
  return rel.empty() ? root : root + "/" + rel;
}

// How a failure names an entry.
std::string shown(const std::string& rel) { return rel.empty() ? "the root" : printable(rel); }

void put(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path, std::ios::binary) << text;
  REQUIRE(::chmod(path.c_str(), mode) == 0);  // not what the umask left
}

std::string time_of(const struct timespec& t) {
  char nsec[16];
  snprintf(nsec, sizeof(nsec), "%09ld", t.tv_nsec);
  return std::to_string(t.tv_sec) + "." + nsec;
}

// Every lstat field P1 compares. Not st_dev (each mount has its own), st_blocks (documented
// to differ) or st_atime (reads move it).
std::string attr_line(const struct stat& st) {
  std::ostringstream out;
  out << "mode 0" << std::oct << st.st_mode << std::dec << " nlink " << st.st_nlink << " uid "
      << st.st_uid << " gid " << st.st_gid << " size " << st.st_size << " rdev "
      << major(st.st_rdev) << ":" << minor(st.st_rdev) << " blksize " << st.st_blksize << " ino "
      << st.st_ino << " mtime " << time_of(st.st_mtim) << " ctime " << time_of(st.st_ctim);
  return out.str();
}

std::string lstat_line(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return "lstat: " + outcome(errno);
  }
  return attr_line(st);
}

// A file's bytes, or why they could not be read (Catch prints a std::optional as {?}).
std::string contents(const std::string& path) {
  const auto bytes = read_file(path);
  return bytes ? "bytes: " + printable(*bytes) : "read failed: " + outcome(errno);
}

std::string link_target(const std::string& path) {
  char buf[PATH_MAX + 1];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n < 0 ? outcome(errno) : "-> " + printable(std::string(buf, static_cast<size_t>(n)));
}

// An xattr's value (or its length, with size 0), or the errno.
std::string xattr_value(const std::string& path, const char* name, size_t size, bool follow) {
  std::string buf(size, '\0');
  char* into = size == 0 ? nullptr : buf.data();
  const ssize_t n = follow ? ::getxattr(path.c_str(), name, into, size)
                           : ::lgetxattr(path.c_str(), name, into, size);
  if (n < 0) {
    return outcome(errno);
  }
  if (size == 0) {
    return "length " + std::to_string(n);
  }
  return "value " + printable(buf.substr(0, static_cast<size_t>(n)));
}

// The entry's own xattr names, sorted, or the errno.
std::string xattr_names(const std::string& path) {
  std::string buf(65536, '\0');
  const ssize_t n = ::llistxattr(path.c_str(), buf.data(), buf.size());
  if (n < 0) {
    return outcome(errno);
  }
  std::vector<std::string> names;
  for (size_t start = 0; start < static_cast<size_t>(n);) {
    names.push_back(buf.c_str() + start);
    start += names.back().size() + 1;
  }
  std::sort(names.begin(), names.end());
  std::string out = "names:";
  for (const auto& name : names) {
    out += " " + printable(name);
  }
  return out;
}

// Each entry of a directory as "name type ino", sorted, . and .. included; or the errno.
std::vector<std::string> dir_entries(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return {"opendir: " + outcome(errno)};
  }
  std::vector<std::string> out;
  errno = 0;
  while (const struct dirent* e = ::readdir(dir)) {
    out.push_back(printable(e->d_name) + " type " + std::to_string(e->d_type) + " ino " +
                  std::to_string(e->d_ino));
  }
  if (errno != 0) {
    out.push_back("readdir: " + outcome(errno));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

// Everything a write could have changed below root, one line per entry: attributes, xattr
// names and content (or link target). Not atime: reading the contents moves it.
std::vector<std::string> state_of(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& rel : list_tree(root)) {
    const std::string path = at(root, rel);
    std::string line = printable(rel) + ": " + lstat_line(path) + " " + xattr_names(path);
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      line += " " + contents(path);
    } else if (S_ISLNK(st.st_mode)) {
      line += " " + link_target(path);
    }
    out.push_back(line);
  }
  return out;
}

// What a child reports for a read that gave other bytes: no errno has this number.
constexpr int kWrongBytes = 250;

// Polls check until it holds; the seconds it took, or nullopt after `limit`.
std::optional<double> seconds_until(const std::function<bool()>& check,
                                    std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (check()) {
      return took.count();
    }
    if (took > limit) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Every kind of entry a dataset directory may hold, for P1. Returns whether the scratch
// filesystem took a user xattr.
bool make_kinds_tree(const std::string& root, const std::string& outside) {
  fs::create_directories(root + "/dir/sub");
  REQUIRE(::chmod(root.c_str(), 0755) == 0);  // other users must get in for access()
  put(outside, "outside the tree\n", 0644);
  put(root + "/file", "some bytes\n", 0644);
  put(root + "/empty", "", 0644);
  put(root + "/exec", "#!/bin/sh\n", 0755);
  put(root + "/private", "mine\n", 0600);
  put(root + "/world_writable", "anyone's\n", 0666);
  put(root + "/setuid", "x", 04755);
  put(root + "/owned", "theirs\n", 0640);
  REQUIRE(::chown((root + "/owned").c_str(), 1234, 5678) == 0);
  put(root + "/timed", "old\n", 0644);
  const struct timespec times[2] = {{1234567890, 123456789}, {1234567890, 987654321}};
  REQUIRE(::utimensat(AT_FDCWD, (root + "/timed").c_str(), times, 0) == 0);
  put(root + "/dir/inner", "inner\n", 0644);
  put(root + "/dir/sub/deeper", "deeper\n", 0644);
  fs::create_directories(root + "/closed");
  put(root + "/closed/inside", "closed\n", 0644);
  REQUIRE(::chmod((root + "/closed").c_str(), 0700) == 0);
  fs::create_directories(root + "/sticky");
  REQUIRE(::chmod((root + "/sticky").c_str(), 01777) == 0);
  REQUIRE(::link((root + "/file").c_str(), (root + "/hardlink").c_str()) == 0);
  fs::create_symlink("file", root + "/rel_link");
  fs::create_symlink("dir", root + "/dir_link");
  fs::create_symlink(outside, root + "/abs_link");
  fs::create_symlink("no_such_target", root + "/dangling");
  fs::create_symlink("../file", root + "/dir/up_link");
  REQUIRE(::mkfifo((root + "/fifo").c_str(), 0644) == 0);
  REQUIRE(::chmod((root + "/fifo").c_str(), 0644) == 0);
  const bool xattrs = ::setxattr((root + "/file").c_str(), "user.label", "cat", 3, 0) == 0;
  if (xattrs) {
    REQUIRE(::setxattr((root + "/dir").c_str(), "user.label", "dog", 3, 0) == 0);
  }
  return xattrs;
}

}  // namespace

// P1. The daemon passes the source's struct stat through (fusefs/filesystem.cc, lookup and
// getattr), st_ino included (only the FUSE node ids are its own), and hides no kind of entry:
// the FIFO and the links are shown as they are (filesystem.cc has no filter on the type).
TEST_CASE("lstat of every entry matches the oracle, also after the kernel forgets the nodes",
          "[mount][parity]") {
  TempDir dir;
  make_kinds_tree(dir / "src", dir / "outside");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  const auto entries = list_tree(oracle.path());
  REQUIRE(entries.size() > 20);
  std::map<std::string, std::string> first;
  for (const auto& rel : entries) {
    INFO("lstat " << shown(rel));
    first[rel] = lstat_line(at(mount.path(), rel));
    CHECK(first[rel] == lstat_line(at(oracle.path(), rel)));
  }
  // Unused dentries and inodes go: the kernel sends FORGET for each, and the next lstat
  // starts with a fresh LOOKUP, which gets a new node id from the daemon.
  REQUIRE(tools::drop_page_cache());  // dentries and inodes too
  for (const auto& rel : entries) {
    INFO("lstat after drop_caches " << shown(rel));
    CHECK(lstat_line(at(mount.path(), rel)) == first[rel]);
  }
  // Two names of one file are one inode, as in the source.
  struct stat a, b;
  REQUIRE(::lstat((mount / "file").c_str(), &a) == 0);
  REQUIRE(::lstat((mount / "hardlink").c_str(), &b) == 0);
  CHECK(a.st_ino == b.st_ino);
}

TEST_CASE("readdir of every directory matches the oracle, . and .. included", "[mount][parity]") {
  TempDir dir;
  make_kinds_tree(dir / "src", dir / "outside");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  const auto entries = list_tree(oracle.path());
  CHECK(list_tree(mount.path()) == entries);
  size_t dirs = 0;
  for (const auto& rel : entries) {
    struct stat st;
    REQUIRE(::lstat(at(oracle.path(), rel).c_str(), &st) == 0);
    if (!S_ISDIR(st.st_mode)) {
      continue;
    }
    INFO("readdir " << shown(rel));
    CHECK(dir_entries(at(mount.path(), rel)) == dir_entries(at(oracle.path(), rel)));
    ++dirs;
  }
  CHECK(dirs == 6);  // the root, dir, dir/sub, dir/sub/deeper, closed, sticky
}

TEST_CASE("readlink, getxattr and listxattr of every entry match the oracle", "[mount][parity]") {
  TempDir dir;
  const bool xattrs = make_kinds_tree(dir / "src", dir / "outside");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  for (const auto& rel : list_tree(oracle.path())) {
    const std::string m = at(mount.path(), rel);
    const std::string o = at(oracle.path(), rel);
    INFO(shown(rel));
    {
      INFO("readlink");
      CHECK(link_target(m) == link_target(o));
    }
    {
      INFO("lgetxattr and getxattr of a missing attribute");
      CHECK(xattr_value(m, "user.missing", 64, false) == xattr_value(o, "user.missing", 64, false));
      CHECK(xattr_value(m, "user.missing", 64, true) == xattr_value(o, "user.missing", 64, true));
    }
    {
      INFO("llistxattr");
      CHECK(xattr_names(m) == xattr_names(o));
    }
    {
      INFO("lgetxattr user.label: the value, its length, and ERANGE for a short buffer");
      for (size_t size : {64, 0, 1}) {
        CHECK(xattr_value(m, "user.label", size, false) ==
              xattr_value(o, "user.label", size, false));
      }
    }
  }
  // The missing attribute really is the ENODATA case, not a filesystem without xattrs.
  CHECK(xattr_value(mount / "file", "user.missing", 64, false) == "ENODATA");
  if (xattrs) {
    CHECK(xattr_value(mount / "file", "user.label", 64, false) == "value cat");
  } else {
    WARN("no user xattrs on the scratch filesystem: only their absence was compared");
  }
}

// With --allow-other the mount also gets default_permissions (fusefs/session.cc): the kernel
// decides access() from the attributes, and the daemon's access handler is not asked. The
// mount is not read-only in the kernel (orders are written into .epochfs/), so W_OK is then
// answered from the modes, as on the writable source, where a read-only mount says EROFS
// (documented in docs/semantics.md); writing itself still fails with EROFS.
TEST_CASE("access() as nobody and as root matches the oracle", "[mount][parity]") {
  TempDir dir;
  make_kinds_tree(dir / "src", dir / "outside");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  const auto entries = list_tree(oracle.path());
  const std::vector<std::pair<const char*, int>> masks = {
      {"R_OK", R_OK}, {"W_OK", W_OK}, {"X_OK", X_OK}};
  auto compare = [&](const Mount& mount, const std::function<int(const std::string&, int)>& as,
                     bool kernel_decides) {
    for (const auto& rel : entries) {
      for (const auto& [mask_name, mask] : masks) {
        INFO("access " << mask_name << " " << shown(rel));
        const std::string expected_from =
            kernel_decides && mask == W_OK ? dir / "src" : oracle.path();
        CHECK(outcome(as(at(mount.path(), rel), mask)) ==
              outcome(as(at(expected_from, rel), mask)));
      }
    }
  };
  auto as_root = [](const std::string& path, int mask) {
    return errno_of(::access(path.c_str(), mask));
  };
  auto as_nobody = [](const std::string& path, int mask) {
    return run_as_nobody([&] { return errno_of(::access(path.c_str(), mask)); });
  };
  SECTION("nobody, through --allow-other") {
    Mount mount(dir / "src", dir / "mnt", {"--allow-other"});
    compare(mount, as_nobody, true);
  }
  SECTION("root, through --allow-other") {
    Mount mount(dir / "src", dir / "mnt", {"--allow-other"});
    compare(mount, as_root, true);
  }
  SECTION("root, through a mount of its own (the daemon answers access)") {
    Mount mount(dir / "src", dir / "mnt");
    compare(mount, as_root, false);
  }
}

namespace {

struct WriteOp {
  std::string name;
  std::function<int(const std::string& base)> run;  // the errno, 0 if it succeeded
  // With no-open the kernel lets this open through without asking the daemon.
  bool opens_existing_for_writing = false;
};

// Each write-family operation on the names of make_write_tree under base: "file", "link" (to
// file), "dir" (holding "inner"), "emptydir", and "new" and "missing", which do not exist.
std::vector<WriteOp> write_ops(const std::string& outside) {
  auto open_op = [](const char* rel, int flags) {
    return [=](const std::string& b) { return open_errno(b + "/" + rel, flags); };
  };
  auto path_op = [](const char* rel, std::function<int(const char*)> op) {
    return [=](const std::string& b) { return errno_of(op((b + "/" + rel).c_str())); };
  };
  auto two_path_op = [](const char* from, const char* to,
                        std::function<int(const char*, const char*)> op) {
    return [=](const std::string& b) {
      return errno_of(op((b + "/" + from).c_str(), (b + "/" + to).c_str()));
    };
  };
  auto chown_nothing = [](const char* p) {
    return ::chown(p, static_cast<uid_t>(-1), static_cast<gid_t>(-1));
  };
  auto touch_link_itself = [](const char* p) {
    return ::utimensat(AT_FDCWD, p, nullptr, AT_SYMLINK_NOFOLLOW);
  };
  auto touch_nothing = [](const char* p) {
    const struct timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    return ::utimensat(AT_FDCWD, p, omit, 0);
  };
  auto rename_noreplace = [](const char* from, const char* to) {
    return ::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
  };
  auto creat_and_close = [](const char* p) {
    const int fd = ::creat(p, 0644);
    if (fd >= 0) {
      ::close(fd);
    }
    return fd;
  };
  // An operation on a read-only fd of base/file.
  auto fd_op = [](std::function<int(int)> op) {
    return [=](const std::string& b) {
      UniqueFd fd(::open((b + "/file").c_str(), O_RDONLY | O_CLOEXEC));
      return fd.valid() ? errno_of(op(fd.get())) : errno;
    };
  };
  return {
      {"open file O_WRONLY", open_op("file", O_WRONLY), true},
      {"open file O_RDWR", open_op("file", O_RDWR), true},
      {"open file O_RDONLY|O_TRUNC", open_op("file", O_RDONLY | O_TRUNC), true},
      {"open file O_WRONLY|O_TRUNC", open_op("file", O_WRONLY | O_TRUNC), true},
      {"open link O_RDWR (followed)", open_op("link", O_RDWR), true},
      {"open dir O_WRONLY", open_op("dir", O_WRONLY)},
      {"open new O_CREAT|O_WRONLY", open_op("new", O_CREAT | O_WRONLY)},
      {"open new O_CREAT|O_RDONLY", open_op("new", O_CREAT | O_RDONLY)},
      {"open file O_CREAT|O_WRONLY", open_op("file", O_CREAT | O_WRONLY), true},
      {"open file O_CREAT|O_RDONLY", open_op("file", O_CREAT | O_RDONLY)},
      {"open new O_CREAT|O_EXCL", open_op("new", O_CREAT | O_EXCL | O_WRONLY)},
      {"open file O_CREAT|O_EXCL", open_op("file", O_CREAT | O_EXCL | O_WRONLY)},
      {"open dir O_CREAT|O_EXCL", open_op("dir", O_CREAT | O_EXCL | O_WRONLY)},
      {"open link O_CREAT|O_EXCL", open_op("link", O_CREAT | O_EXCL | O_WRONLY)},
      {"open missing/new O_CREAT", open_op("missing/new", O_CREAT | O_WRONLY)},
      {"open the directory O_TMPFILE", open_op("", O_TMPFILE | O_RDWR)},
      {"creat new", path_op("new", creat_and_close)},
      {"creat file", path_op("file", creat_and_close), true},
      {"mkdir new", path_op("new", [](const char* p) { return ::mkdir(p, 0755); })},
      {"mkdir dir", path_op("dir", [](const char* p) { return ::mkdir(p, 0755); })},
      {"mkdir file", path_op("file", [](const char* p) { return ::mkdir(p, 0755); })},
      {"mkdir link", path_op("link", [](const char* p) { return ::mkdir(p, 0755); })},
      {"mknod new S_IFREG",
       path_op("new", [](const char* p) { return ::mknod(p, S_IFREG | 0644, 0); })},
      {"mknod new S_IFIFO",
       path_op("new", [](const char* p) { return ::mknod(p, S_IFIFO | 0644, 0); })},
      {"mknod file S_IFREG",
       path_op("file", [](const char* p) { return ::mknod(p, S_IFREG | 0644, 0); })},
      {"symlink new", path_op("new", [](const char* p) { return ::symlink("file", p); })},
      {"symlink onto file", path_op("file", [](const char* p) { return ::symlink("x", p); })},
      {"symlink onto link", path_op("link", [](const char* p) { return ::symlink("x", p); })},
      {"link file to new", two_path_op("file", "new", ::link)},
      {"link file onto dir", two_path_op("file", "dir", ::link)},
      {"link dir to new", two_path_op("dir", "new", ::link)},
      {"link from outside the mount to new",
       [outside](const std::string& b) {
         return errno_of(::link(outside.c_str(), (b + "/new").c_str()));
       }},
      {"rename file to new", two_path_op("file", "new", ::rename)},
      {"rename file onto link", two_path_op("file", "link", ::rename)},
      {"rename file into dir", two_path_op("file", "dir/new", ::rename)},
      {"rename dir to new", two_path_op("dir", "new", ::rename)},
      {"rename missing to new", two_path_op("missing", "new", ::rename)},
      {"rename file onto dir", two_path_op("file", "dir", ::rename)},
      {"renameat2 RENAME_NOREPLACE file onto link", two_path_op("file", "link", rename_noreplace)},
      {"unlink file", path_op("file", ::unlink)},
      {"unlink link", path_op("link", ::unlink)},
      {"unlink missing", path_op("missing", ::unlink)},
      {"unlink dir", path_op("dir", ::unlink)},
      {"rmdir emptydir", path_op("emptydir", ::rmdir)},
      {"rmdir dir (not empty)", path_op("dir", ::rmdir)},
      {"rmdir missing", path_op("missing", ::rmdir)},
      {"rmdir file", path_op("file", ::rmdir)},
      {"truncate file", path_op("file", [](const char* p) { return ::truncate(p, 0); })},
      {"truncate link (followed)", path_op("link", [](const char* p) { return ::truncate(p, 0); })},
      {"truncate missing", path_op("missing", [](const char* p) { return ::truncate(p, 0); })},
      {"truncate dir", path_op("dir", [](const char* p) { return ::truncate(p, 0); })},
      {"ftruncate a read-only fd", fd_op([](int fd) { return ::ftruncate(fd, 0); })},
      {"chmod file", path_op("file", [](const char* p) { return ::chmod(p, 0600); })},
      {"chmod dir", path_op("dir", [](const char* p) { return ::chmod(p, 0700); })},
      {"chmod the directory itself", path_op("", [](const char* p) { return ::chmod(p, 0700); })},
      {"chmod missing", path_op("missing", [](const char* p) { return ::chmod(p, 0600); })},
      {"chown file", path_op("file", [](const char* p) { return ::chown(p, 1, 1); })},
      {"chown file to -1 -1 (no change)", path_op("file", chown_nothing)},
      {"lchown link", path_op("link", [](const char* p) { return ::lchown(p, 1, 1); })},
      {"utimensat file to now",
       path_op("file", [](const char* p) { return ::utimensat(AT_FDCWD, p, nullptr, 0); })},
      {"utimensat link to now, not followed", path_op("link", touch_link_itself)},
      {"utimensat file, both UTIME_OMIT", path_op("file", touch_nothing)},
      {"setxattr file user.x",
       path_op("file", [](const char* p) { return ::setxattr(p, "user.x", "1", 1, 0); })},
      {"setxattr dir user.x",
       path_op("dir", [](const char* p) { return ::setxattr(p, "user.x", "1", 1, 0); })},
      {"setxattr file user.label XATTR_REPLACE",
       path_op("file",
               [](const char* p) { return ::setxattr(p, "user.label", "2", 1, XATTR_REPLACE); })},
      {"lsetxattr link user.x",
       path_op("link", [](const char* p) { return ::lsetxattr(p, "user.x", "1", 1, 0); })},
      {"removexattr file user.label",
       path_op("file", [](const char* p) { return ::removexattr(p, "user.label"); })},
      {"removexattr file user.missing",
       path_op("file", [](const char* p) { return ::removexattr(p, "user.missing"); })},
      {"lremovexattr link user.x",
       path_op("link", [](const char* p) { return ::lremovexattr(p, "user.x"); })},
      {"fallocate a read-only fd", fd_op([](int fd) { return ::fallocate(fd, 0, 0, 4096); })},
      {"copy_file_range from outside into file",
       [outside](const std::string& b) {
         UniqueFd in(::open(outside.c_str(), O_RDONLY | O_CLOEXEC));
         UniqueFd out(::open((b + "/file").c_str(), O_RDONLY | O_CLOEXEC));
         if (!in.valid() || !out.valid()) {
           return errno;
         }
         return errno_of(::copy_file_range(in.get(), nullptr, out.get(), nullptr, 4, 0));
       }},
  };
}

// The names write_ops works on, in the root and again in sub/.
void make_write_tree(const std::string& root) {
  for (const std::string& base : {root, root + "/sub"}) {
    fs::create_directories(base + "/dir");
    fs::create_directories(base + "/emptydir");
    put(base + "/file", "keep me\n", 0644);
    put(base + "/dir/inner", "inner\n", 0644);
    fs::create_symlink("file", base + "/link");
    // No check: without user xattrs both sides answer the removexattr cases alike.
    ::setxattr((base + "/file").c_str(), "user.label", "cat", 3, 0);
  }
}

// Operations the kernel answers itself, before asking the filesystem, on a mount that is not
// read-only: the errno a read-only mount gives first (EROFS) is then not the one seen
// (documented in docs/semantics.md). Each still fails and changes nothing.
const std::map<std::string, int>& kernel_answers_first() {
  static const std::map<std::string, int> answers = {
      {"unlink missing", ENOENT},         // the lookup fails first
      {"rmdir missing", ENOENT},          //
      {"rename missing to new", ENOENT},  //
      {"unlink dir", EISDIR},             // the type checks of the VFS
      {"rmdir file", ENOTDIR},            //
      {"rename file onto dir", EISDIR},   //
      {"renameat2 RENAME_NOREPLACE file onto link", EEXIST},
      {"link dir to new", EPERM},                     // no hard links to directories
      {"link from outside the mount to new", EXDEV},  // across mounts
      {"lsetxattr link user.x", EPERM},               // no user.* attributes on links
      {"lremovexattr link user.x", EPERM},            //
      {"open the directory O_TMPFILE", EOPNOTSUPP},   // libfuse 3.14 has no tmpfile handler
  };
  return answers;
}

}  // namespace

// P2. The mount is not read-only in the kernel (fusefs/session.cc: writes into .epochfs/ must
// reach the daemon), so the VFS checks that a read-only mount makes before asking the
// filesystem are not made; the daemon answers EROFS to whatever reaches it. The control
// directory, where writes succeed, is the documented exception and is not touched here.
TEST_CASE("every write-family operation fails as on a read-only bind mount and changes nothing",
          "[mount][parity]") {
  TempDir dir;
  make_write_tree(dir / "src");
  put(dir / "outside", "outside\n", 0644);
  const auto before = state_of(dir / "src");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  const auto ops = write_ops(dir / "outside");
  for (const std::string sub : {"", "/sub"}) {
    for (const auto& op : ops) {
      INFO(op.name << " in " << (sub.empty() ? "the mount root" : "sub/"));
      int expected = op.run(oracle.path() + sub);
      if (op.opens_existing_for_writing && !opens_reach_daemon()) {
        continue;
      }
      const auto kernel = kernel_answers_first().find(op.name);
      if (kernel != kernel_answers_first().end() && expected == EROFS) {
        expected = kernel->second;
      }
      CHECK(outcome(op.run(mount.path() + sub)) == outcome(expected));
    }
  }
  CHECK(state_of(dir / "src") == before);
  // And the kernel's view agrees: no open with O_TRUNC left a file looking empty.
  CHECK(state_of(mount.path()) == state_of(oracle.path()));
}

namespace {

// Legal names that tools get wrong: each must reach its own file, byte for byte.
std::vector<std::string> hostile_names() {
  std::string two_byte, three_byte;
  for (int i = 0; i < 127; ++i) {
    two_byte += "\xC3\xA9";  // é
  }
  for (int i = 0; i < 85; ++i) {
    three_byte += "\xE6\x97\xA5";  // 日
  }
  return {
      "\xC3\xBCn\xC3\xAF"
      "c\xC3\xB8"
      "d\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
      "caf\xC3\xA9",   // NFC: é as one code point
      "cafe\xCC\x81",  // NFD: e and a combining acute accent
      " leading space",
      "trailing space ",
      "two  spaces",
      " ",
      "-rf",
      "--help",
      "new\nline",
      "tab\there",
      "\x01"
      "control",
      "back\\slash",
      "star*question?",
      "...",
      "#hash;semicolon",
      "\xFF\xFE not UTF-8",
      std::string(255, 'n'),
      two_byte + "x",  // 255 bytes of 2-byte characters and one more
      three_byte,      // 255 bytes of 3-byte characters
      "Case",
      "case",
      "CASE",
  };
}

std::string content_for(size_t i, const std::string& name) {
  return "file " + std::to_string(i) + " named " + name + "\n";
}

}  // namespace

// P5. Names pass through untouched (no normalization, no case folding, no escaping): the
// daemon joins the bytes the kernel gives it (cachestore::join_path).
TEST_CASE("hostile but legal names read and list as through the oracle", "[mount][parity]") {
  TempDir dir;
  const auto names = hostile_names();
  fs::create_directories(dir / "src/files");
  for (size_t i = 0; i < names.size(); ++i) {
    put(dir / ("src/files/" + names[i]), content_for(i, names[i]), 0644);
    fs::create_directories(dir / ("src/dirs/" + names[i]));
    put(dir / ("src/dirs/" + names[i] + "/inside"), content_for(i, "inside"), 0644);
  }
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  for (const char* where : {"files", "dirs"}) {
    INFO("readdir " << where);
    const auto listed = dir_entries(oracle.path() + "/" + where);
    REQUIRE(listed.size() == names.size() + 2);  // every twin is there, and . and ..
    CHECK(dir_entries(mount / where) == listed);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    for (const std::string& rel : {"files/" + names[i], "dirs/" + names[i] + "/inside"}) {
      INFO("read " << printable(rel));
      const std::string expected = contents(oracle.path() + "/" + rel);
      REQUIRE(contains(expected, "bytes: file "));
      CHECK(contents(mount / rel) == expected);
    }
  }
}

namespace {

// Components of at most 250 bytes under `top` whose join with '/' is `length` bytes long.
std::vector<std::string> deep_path(const std::string& top, size_t length) {
  std::vector<std::string> out = {top};
  size_t left = length - top.size() - 1;
  for (char c = 'a'; left > 251; ++c) {  // a 250-byte component and its slash
    out.push_back(std::string(250, c));
    left -= 251;
  }
  out.push_back(std::string(left, 'z'));
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    out += (out.empty() ? "" : "/") + p;
  }
  return out;
}

// Makes root/parts... (directories, then a file holding text) one component at a time: the
// whole path may be longer than a system call takes.
void make_deep_file(const std::string& root, const std::vector<std::string>& parts,
                    const std::string& text) {
  UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(dir.valid());
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    REQUIRE(::mkdirat(dir.get(), parts[i].c_str(), 0755) == 0);
    UniqueFd next(::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(next.valid());
    dir = std::move(next);
  }
  UniqueFd file(
      ::openat(dir.get(), parts.back().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  REQUIRE(file.valid());
  REQUIRE(::write(file.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

// Walks root/parts... one component at a time: the last directory's listing and the file's
// bytes, or where the walk failed and with which errno.
std::string read_by_steps(const std::string& root, const std::vector<std::string>& parts) {
  UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return "open of the root: " + outcome(errno);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    UniqueFd next(::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!next.valid()) {
      return "open of component " + std::to_string(i) + ": " + outcome(errno);
    }
    dir = std::move(next);
  }
  std::vector<std::string> names;  // the first bytes of each: the components are 250 long
  if (DIR* d = ::fdopendir(::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0))) {
    while (const struct dirent* e = ::readdir(d)) {
      names.push_back(printable(e->d_name).substr(0, 8));
    }
    ::closedir(d);
  } else {
    names.push_back(outcome(errno));
  }
  std::sort(names.begin(), names.end());
  std::string out = "listing:";
  for (const auto& name : names) {
    out += " " + name;
  }
  UniqueFd file(::openat(dir.get(), parts.back().c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) {
    return out + "; open of the file: " + outcome(errno);
  }
  char buf[256];
  const ssize_t n = ::read(file.get(), buf, sizeof(buf));
  return out + "; bytes: " + (n < 0 ? outcome(errno) : std::string(buf, static_cast<size_t>(n)));
}

// Removes dirfd/name and all below it by file descriptors: std::filesystem::remove_all names
// whole paths, which fail past PATH_MAX.
void remove_at(int dirfd, const std::string& name) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    ::unlinkat(dirfd, name.c_str(), 0);
    return;
  }
  std::vector<std::string> names;
  if (DIR* d = ::fdopendir(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0))) {
    while (const struct dirent* e = ::readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
        names.push_back(e->d_name);
      }
    }
    ::closedir(d);
  }
  for (const auto& n : names) {
    remove_at(fd.get(), n);
  }
  ::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR);
}

// Removes parent/name at the end of a test; declared before the mounts, so it runs after
// their teardown and before TempDir's.
class RemovedAtEnd {
 public:
  RemovedAtEnd(std::string parent, std::string name)
      : parent_(std::move(parent)), name_(std::move(name)) {}

  ~RemovedAtEnd() {
    UniqueFd fd(::open(parent_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.valid()) {
      remove_at(fd.get(), name_);
    }
  }

  RemovedAtEnd(const RemovedAtEnd&) = delete;
  RemovedAtEnd& operator=(const RemovedAtEnd&) = delete;

 private:
  std::string parent_;
  std::string name_;
};

}  // namespace

TEST_CASE("a path of 4095 bytes reads and lists as through the oracle", "[mount][parity]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  RemovedAtEnd cleanup_a(dir / "src", "deep_a");
  RemovedAtEnd cleanup_b(dir / "src", "deep_b");
  // The oracle's path is as long as the mount's, so one relative path fits both or neither.
  const std::string mount_path = dir / "mnt";
  REQUIRE((dir / "ora").size() == mount_path.size());
  // The longest absolute path a system call takes, through the mount: 4095 bytes.
  const auto whole = deep_path("deep_a", PATH_MAX - 1 - mount_path.size() - 1);
  make_deep_file(dir / "src", whole, "at the end of a 4095-byte path\n");
  // 4095 bytes below the mount root, reached one directory at a time: the daemon then names
  // the file to the source by a 4095-byte relative path.
  const auto below_root = deep_path("deep_b", PATH_MAX - 1);
  make_deep_file(dir / "src", below_root, "4095 bytes below the root\n");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", mount_path);

  const std::string rel = joined(whole);
  REQUIRE((mount / rel).size() == PATH_MAX - 1);
  const std::string expected = contents(oracle.path() + "/" + rel);
  REQUIRE(contains(expected, "bytes: at the end"));
  CHECK(contents(mount / rel) == expected);
  CHECK(read_by_steps(mount.path(), whole) == read_by_steps(oracle.path(), whole));

  REQUIRE(joined(below_root).size() == PATH_MAX - 1);
  const std::string by_steps = read_by_steps(oracle.path(), below_root);
  REQUIRE(contains(by_steps, "bytes: 4095 bytes below the root"));
  CHECK(read_by_steps(mount.path(), below_root) == by_steps);
}

// Linux has no limit on a tree's depth, only on the path one call names; a reader that walks
// with openat (find, rsync, fts) gets there through the oracle. The daemon names every file to
// the source by its path from the source's root, so past PATH_MAX it answers ENAMETOOLONG: a
// documented limit (docs/semantics.md), refused cleanly rather than misread.
TEST_CASE("a file deeper than PATH_MAX below the root is refused with ENAMETOOLONG",
          "[mount][parity]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  RemovedAtEnd cleanup(dir / "src", "deeper");
  const auto parts = deep_path("deeper", PATH_MAX + 200);
  make_deep_file(dir / "src", parts, "past PATH_MAX\n");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  const std::string expected = read_by_steps(oracle.path(), parts);
  REQUIRE(contains(expected, "bytes: past PATH_MAX"));
  CHECK(contains(read_by_steps(mount.path(), parts), "ENAMETOOLONG"));
}

// S1. --allow-other comes with default_permissions (fusefs/session.cc): the kernel checks
// other users against the modes it holds, refreshed after the attribute timeout (and at once
// after a refusal). Without it, a grant would outlive a chmod in the source (libfuse #15).
TEST_CASE("nobody is refused a root 0600 file as through the oracle, and chmods take effect",
          "[mount][input]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  REQUIRE(::chmod((dir / "src").c_str(), 0755) == 0);
  const std::string secret = dir / "src/secret";
  put(secret, "secret\n", 0600);
  REQUIRE(::chown(secret.c_str(), 0, 0) == 0);
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  // A short timeout: the longest the kernel may go on with a mode the source no longer has.
  Mount mount(dir / "src", dir / "mnt", {"--allow-other", "--attr-timeout", "0.5"});
  auto nobody_reads = [](const std::string& path) {
    return run_as_nobody([&] {
      const auto got = read_file(path);
      return !got ? errno : *got == "secret\n" ? 0 : kWrongBytes;
    });
  };
  const auto limit = std::chrono::seconds(3);  // the timeout, with room for a loaded machine

  CHECK(nobody_reads(oracle.path() + "/secret") == EACCES);
  CHECK(nobody_reads(mount / "secret") == EACCES);
  // Root is let in, and the kernel now holds the 0600 mode.
  CHECK(contents(mount / "secret") == contents(oracle.path() + "/secret"));

  REQUIRE(::chmod(secret.c_str(), 0644) == 0);
  CHECK(nobody_reads(oracle.path() + "/secret") == 0);
  const auto granted = seconds_until([&] { return nobody_reads(mount / "secret") == 0; }, limit);
  CHECK(granted.has_value());

  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  CHECK(nobody_reads(oracle.path() + "/secret") == EACCES);
  const auto revoked =
      seconds_until([&] { return nobody_reads(mount / "secret") == EACCES; }, limit);
  INFO("the grant outlived the chmod by " << revoked.value_or(-1) << " s");
  CHECK(revoked.has_value());
  CHECK(nobody_reads(mount / "secret") == EACCES);
}

// S7. The daemon only answers READLINK; the kernel follows the target in the reader's own
// namespace, as through any mount, and the daemon opens nothing outside its source.
TEST_CASE("links to /etc/passwd and to / are followed as through the oracle", "[mount][parity]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  fs::create_symlink("/etc/passwd", dir / "src/link_to_passwd");
  fs::create_symlink("/", dir / "src/dirlink");
  // Enough .. to climb from the mountpoint to / (extra ones stay at /).
  fs::create_symlink("../../../../../../../../../../../../etc/passwd", dir / "src/climb");
  ReadOnlyBind oracle(dir / "src", dir / "ora");
  Mount mount(dir / "src", dir / "mnt");
  const double opens_before = stat_of(mount, "opens");
  for (const char* link : {"link_to_passwd", "dirlink", "climb"}) {
    INFO("readlink " << link);
    CHECK(link_target(mount / link) == link_target(oracle.path() + "/" + link));
  }
  const std::vector<std::pair<std::string, std::string>> followed = {
      {"link_to_passwd", "/etc/passwd"},
      {"dirlink/etc/hostname", "/etc/hostname"},
      {"dirlink/etc/passwd", "/etc/passwd"},
      {"climb", "/etc/passwd"},
  };
  for (const auto& [rel, target] : followed) {
    INFO("open " << rel);
    const std::string expected = contents(oracle.path() + "/" + rel);
    CHECK(contents(mount / rel) == expected);
    CHECK(expected == contents(target));
    struct stat m, t;
    REQUIRE(::stat((mount / rel).c_str(), &m) == 0);
    REQUIRE(::stat(target.c_str(), &t) == 0);
    CHECK(m.st_dev == t.st_dev);  // the host's file itself, not a copy served by the daemon
    CHECK(m.st_ino == t.st_ino);
  }
  CHECK(stat_of(mount, "opens") == opens_before);
}

}  // namespace epochfs::test
