// The overlay's core without a mount: what each operation returns for the kernel.
#include "fusefs/filesystem.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>

#include "test/support/scratch_dir.h"

namespace epochfs::fusefs {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  test::ScratchDir dir{"fs"};
  fs::path base = dir.path();
  std::unique_ptr<Filesystem> filesystem;

  Fixture() {
    fs::create_directories(base / "src" / "dir");
    std::ofstream(base / "src" / "file") << "data";
    std::ofstream(base / "src" / "dir" / "inner") << "x";
    std::ofstream(base / "outside") << "secret";
    fs::create_symlink(base / "outside", base / "src" / "link_out");
    fs::create_symlink("..", base / "src" / "dir" / "up");
    auto root = cachestore::RootDir::open(base / "src");
    REQUIRE(root.is_ok());
    auto st = root.value().stat_at("");
    REQUIRE(st.is_ok());
    filesystem =
        std::make_unique<Filesystem>(std::move(root).value(), st.value(), FilesystemOptions{});
  }
};

}  // namespace

TEST_CASE("lookup returns the source's attributes and takes a reference", "[filesystem]") {
  Fixture f;
  auto e = f.filesystem->lookup(kRootInodeId, "file");
  REQUIRE(e.is_ok());
  CHECK(e.value().attr.st_size == 4);
  struct stat st;
  REQUIRE(::stat((f.base / "src" / "file").c_str(), &st) == 0);
  CHECK(e.value().attr.st_ino == st.st_ino);
  CHECK(f.filesystem->inodes().lookup_count(e.value().id) == 1);
  f.filesystem->forget(e.value().id, 1);
  CHECK(f.filesystem->inodes().size() == 1);
}

TEST_CASE("lookup refuses names that are not one component", "[filesystem]") {
  Fixture f;
  CHECK(f.filesystem->lookup(kRootInodeId, "..").error_code() == ENOENT);
  CHECK(f.filesystem->lookup(kRootInodeId, ".").error_code() == ENOENT);
  CHECK(f.filesystem->lookup(kRootInodeId, "dir/inner").error_code() == ENOENT);
  CHECK(f.filesystem->lookup(kRootInodeId, std::string(300, 'x')).error_code() == ENAMETOOLONG);
  CHECK(f.filesystem->lookup(kRootInodeId, "missing").error_code() == ENOENT);
  CHECK(f.filesystem->lookup(12345, "file").error_code() == ESTALE);
}

TEST_CASE("symlinks are described, and nothing is reached through them", "[filesystem]") {
  Fixture f;
  auto link = f.filesystem->lookup(kRootInodeId, "link_out");
  REQUIRE(link.is_ok());
  CHECK(S_ISLNK(link.value().attr.st_mode));
  auto target = f.filesystem->readlink(link.value().id);
  REQUIRE(target.is_ok());
  CHECK(target.value() == (f.base / "outside").string());
  // The kernel never opens a symlink, but if asked we must not follow it out of the root.
  CHECK_FALSE(f.filesystem->open(link.value().id, O_RDONLY).is_ok());
  // A lookup below a symlink (as if it were a directory) fails rather than following it.
  CHECK_FALSE(f.filesystem->lookup(link.value().id, "x").is_ok());
}

TEST_CASE("open for writing answers EROFS", "[filesystem]") {
  Fixture f;
  auto e = f.filesystem->lookup(kRootInodeId, "file");
  REQUIRE(e.is_ok());
  for (int flags : {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC, O_WRONLY | O_APPEND}) {
    CHECK(f.filesystem->open(e.value().id, flags).error_code() == EROFS);
  }
  CHECK(f.filesystem->access(e.value().id, W_OK).error_code() == EROFS);
  CHECK(f.filesystem->access(e.value().id, R_OK).is_ok());
  CHECK(f.filesystem->access(e.value().id, X_OK).error_code() == EACCES);
}

TEST_CASE("open keeps the page cache only while the file is unchanged", "[filesystem]") {
  Fixture f;
  auto e = f.filesystem->lookup(kRootInodeId, "file");
  REQUIRE(e.is_ok());
  auto first = f.filesystem->open(e.value().id, O_RDONLY);
  REQUIRE(first.is_ok());
  CHECK_FALSE(first.value().keep_cache);
  auto second = f.filesystem->open(e.value().id, O_RDONLY);
  REQUIRE(second.is_ok());
  CHECK(second.value().keep_cache);
  char buf[8] = {};
  CHECK(::pread(second.value().handle->data()->file.fd.get(), buf, sizeof(buf), 0) == 4);
  CHECK(std::string(buf) == "data");
  // Same size, new content: ctime and mtime move, so cached pages must go.
  std::ofstream(f.base / "src" / "file") << "DATA";
  auto third = f.filesystem->open(e.value().id, O_RDONLY);
  REQUIRE(third.is_ok());
  CHECK_FALSE(third.value().keep_cache);
}

TEST_CASE("directories list every entry, resumable at any offset", "[filesystem]") {
  Fixture f;
  for (int i = 0; i < 500; ++i) {
    std::ofstream(f.base / "src" / "dir" / ("f" + std::to_string(i)));
  }
  auto dir = f.filesystem->lookup(kRootInodeId, "dir");
  REQUIRE(dir.is_ok());
  auto handle = f.filesystem->opendir(dir.value().id);
  REQUIRE(handle.is_ok());
  DirHandle* h = handle.value();
  std::set<std::string> names;
  off_t resume = 0;
  // Read two entries at a time, re-seeking as the kernel does between readdir calls.
  while (true) {
    h->seek(resume);
    auto a = h->next();
    if (!a) {
      break;
    }
    names.insert(a->name);
    resume = a->next_offset;
  }
  CHECK(names.size() == 504);  // 500 + inner + up + . + ..
  CHECK(names.count("inner") == 1);
  CHECK(names.count("..") == 1);
  f.filesystem->releasedir(h);
}

TEST_CASE("handles the kernel never released are freed with the filesystem", "[filesystem]") {
  // After a lazy unmount the connection can end before RELEASE arrives; ASan's leak check
  // fails this test if the Filesystem does not own its open handles.
  Fixture f;
  auto e = f.filesystem->lookup(kRootInodeId, "file");
  REQUIRE(e.is_ok());
  REQUIRE(f.filesystem->open(e.value().id, O_RDONLY).is_ok());
  REQUIRE(f.filesystem->opendir(kRootInodeId).is_ok());
  f.filesystem.reset();
}

}  // namespace epochfs::fusefs

namespace epochfs::fusefs {
namespace {

// A Filesystem over a source of n files as --data-path no-open serves it.
struct ImplicitFixture {
  test::ScratchDir dir{"fs"};
  fs::path base = dir.path();
  std::unique_ptr<Filesystem> filesystem;

  explicit ImplicitFixture(int files) {
    fs::create_directories(base / "src");
    for (int i = 0; i < files; ++i) {
      std::ofstream(base / "src" / ("f" + std::to_string(i))) << "data " << i;
    }
    auto root = cachestore::RootDir::open(base / "src");
    REQUIRE(root.is_ok());
    auto st = root.value().stat_at("");
    REQUIRE(st.is_ok());
    FilesystemOptions options;
    options.implicit_opens = true;
    filesystem = std::make_unique<Filesystem>(std::move(root).value(), st.value(), options);
  }

  InodeId id_of(int i) {
    auto e = filesystem->lookup(kRootInodeId, "f" + std::to_string(i));
    REQUIRE(e.is_ok());
    return e.value().id;
  }
};

}  // namespace

TEST_CASE("reads without a handle reuse an open, open afresh at offset 0, keep a bounded number",
          "[filesystem][no-open]") {
  ImplicitFixture f(kImplicitOpensKept + 10);
  const InodeId first = f.id_of(0);
  auto a = f.filesystem->implicit_open(first, 0);
  REQUIRE(a.is_ok());
  auto b = f.filesystem->implicit_open(first, 4096);
  REQUIRE(b.is_ok());
  CHECK(&b.value()->handle() == &a.value()->handle());  // a later read of the same open
  auto c = f.filesystem->implicit_open(first, 0);
  REQUIRE(c.is_ok());
  CHECK(&c.value()->handle() != &a.value()->handle());  // a reader starting the file again
  CHECK(f.filesystem->engine_stats().opens == 2);
  for (size_t i = 1; i < kImplicitOpensKept + 10; ++i) {
    REQUIRE(f.filesystem->implicit_open(f.id_of(static_cast<int>(i)), 0).is_ok());
  }
  CHECK(f.filesystem->implicit_opens_kept() == kImplicitOpensKept);
  // The leases held here still read: a dropped open closes only when its last read ends.
  char buf[16] = {};
  CHECK(::pread(a.value()->handle().data()->read_fd.load(), buf, sizeof(buf), 0) == 6);
  CHECK(std::string(buf) == "data 0");
}

TEST_CASE("without opens each lookup of a control file is a snapshot of its own",
          "[filesystem][no-open]") {
  ImplicitFixture f(3);
  auto one = f.filesystem->lookup(kControlDirId, "stats");
  auto two = f.filesystem->lookup(kControlDirId, "stats");
  REQUIRE(one.is_ok());
  REQUIRE(two.is_ok());
  CHECK(one.value().id != two.value().id);
  auto st = f.filesystem->getattr(one.value().id);
  REQUIRE(st.is_ok());
  const std::string before = f.filesystem->control_file_read(one.value().id, 0, 1 << 20);
  CHECK(before.size() == static_cast<size_t>(st.value().st_size));
  CHECK(before.find("\"opens\": 0") != std::string::npos);
  REQUIRE(f.filesystem->implicit_open(f.id_of(1), 0).is_ok());
  // The first snapshot keeps its content; the second was made after the open.
  CHECK(f.filesystem->control_file_read(one.value().id, 0, 1 << 20) == before);
  CHECK(f.filesystem->control_file_read(two.value().id, 0, 1 << 20).find("\"opens\": 1") !=
        std::string::npos);
  f.filesystem->forget(one.value().id, 1);
  CHECK(f.filesystem->control_file_read(one.value().id, 0, 1 << 20).empty());
}

}  // namespace epochfs::fusefs
