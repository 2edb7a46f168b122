// Kernel passthrough (--data-path passthrough, fusefs/passthrough.h) on real mounts: cached
// files, and the source files of misses, are read by the kernel with no READ reaching the
// daemon and the right bytes; a network or FUSE source is read the classic way; the mount
// falls back to classic when the kernel does not offer passthrough; a reader keeps its bytes
// while the cache churns; a file changed in the source is read anew. The rest of the mount
// suite also runs once with passthrough (test/CMakeLists.txt).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/dataset.h"
#include "tools/lab/read_bench.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPassthrough = {"--data-path", "passthrough"};

tools::StatsDoc stats(const Mount& mount) {
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  return *doc;
}

// Reads every file once (misses: copies staged), then again from the cache.
void read_twice(const Mount& mount, const std::string& src, int count) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      check_same(mount / ("f" + std::to_string(i)), src + "/f" + std::to_string(i));
    }
    wait_for_staging(mount);
    REQUIRE(tools::drop_page_cache());
  }
}

}  // namespace

TEST_CASE("with passthrough the kernel reads cached files itself, byte for byte",
          "[mount][passthrough]") {
  SKIP_WITHOUT_PASSTHROUGH();
  TempDir dir;
  // A local source (tmpfs, whatever the test directory is on): its misses get passthrough too.
  Tmpfs local(dir / "src", "size=16m");
  write_files(dir / "src", 20, 110000);
  Mount mount(dir / "src", dir / "mnt", kPassthrough);
  read_twice(mount, dir / "src", 20);
  CHECK(stats(mount).values["data_path.mode"] == "passthrough");
  CHECK(stat_of(mount, "hits") == 20);
  // Both passes: the first read the source files, the second the copies.
  CHECK(stat_of(mount, "data_path.passthrough_opens") == 40);
  CHECK(stat_of(mount, "data_path.source_passthrough_opens") == 20);
  // No READ of a cached file reached the daemon; the misses' bytes count at their opens.
  CHECK(stat_of(mount, "bytes_from_cache") == 0);
  CHECK(stat_of(mount, "bytes_from_source") == 20 * 110000);
  CHECK(stat_of(mount, "data_path.backing_files") == 0);  // all released with their opens
}

TEST_CASE("a file cached while a miss's open lasts is read from the source by its next open",
          "[mount][passthrough]") {
  SKIP_WITHOUT_PASSTHROUGH();
  TempDir dir;
  Tmpfs local(dir / "src", "size=16m");
  write_files(dir / "src", 1, 110000);
  Mount mount(dir / "src", dir / "mnt", kPassthrough);
  // The miss: the kernel reads the source file, and the copy is made meanwhile.
  const int miss_fd = ::open((mount / "f0").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(miss_fd >= 0);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == 1);
  // A hit now: the kernel takes no other backing file for the inode while the miss's open
  // lasts, so this open shares the source's, and its bytes count as the source's.
  check_same(mount / "f0", dir / "src/f0");
  std::string got(110000, '\0');
  CHECK(::pread(miss_fd, got.data(), got.size(), 0) == 110000);
  ::close(miss_fd);
  std::string want(110000, '\0');
  tools::fill_content(0, 1, 0, want.data(), want.size());
  CHECK(got == want);
  CHECK(stat_of(mount, "hits") == 1);
  CHECK(stat_of(mount, "data_path.source_passthrough_opens") == 2);
  CHECK(stat_of(mount, "bytes_from_source") == 2 * 110000);
  // Once both are closed (the kernel sends RELEASE in the background), the next open reads
  // the copy.
  for (int i = 0; i < 500 && stat_of(mount, "data_path.backing_files") > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(stat_of(mount, "data_path.backing_files") == 0);
  check_same(mount / "f0", dir / "src/f0");
  CHECK(stat_of(mount, "data_path.passthrough_opens") == 3);
  CHECK(stat_of(mount, "data_path.source_passthrough_opens") == 2);
}

TEST_CASE("a source on a network or FUSE filesystem is read the classic way, its copies not",
          "[mount][passthrough]") {
  SKIP_WITHOUT_PASSTHROUGH();
  TempDir dir;
  write_files(dir / "src", 10, 110000);
  // The outer mount's source is a FUSE mount: a passthrough open would make the kernel open
  // the source file again (a request to its server), so misses go through the daemon. (The
  // inner mount is classic: the kernel would take its files as backing files.)
  Mount inner(dir / "src", dir / "inner", {"--data-path", "classic"});
  Mount outer(inner.path(), dir / "outer", kPassthrough);
  read_twice(outer, dir / "src", 10);
  CHECK(stats(outer).values["data_path.mode"] == "passthrough");
  CHECK(stat_of(outer, "data_path.source_passthrough_opens") == 0);
  CHECK(stat_of(outer, "data_path.passthrough_opens") == 10);  // the second pass, from copies
  CHECK(stat_of(outer, "bytes_from_source") == 10 * 110000);   // READs, through the daemon
}

TEST_CASE("without the kernel's offer of passthrough the mount stays classic",
          "[mount][passthrough]") {
  TempDir dir;
  write_files(dir / "src", 10, 110000);
  // The daemon reads this when the kernel's INIT arrives: it then ignores the offer.
  REQUIRE(setenv("EPOCHFS_TEST_DENY_PASSTHROUGH", "1", 1) == 0);
  Mount mount(dir / "src", dir / "mnt", kPassthrough);
  unsetenv("EPOCHFS_TEST_DENY_PASSTHROUGH");
  read_twice(mount, dir / "src", 10);
  auto doc = stats(mount);
  CHECK(doc.values["data_path.mode"] == "classic");
  CHECK(doc.values["data_path.classic_because"].find("does not offer") != std::string::npos);
  CHECK(stat_of(mount, "data_path.passthrough_opens") == 0);
  CHECK(stat_of(mount, "bytes_from_cache") == 10 * 110000);
}

TEST_CASE("a passthrough reader keeps its bytes while the cache churns under it",
          "[mount][passthrough]") {
  constexpr uint64_t kSize = 400000;
  TempDir dir;
  write_files(dir / "src", 12, kSize);
  Mount mount(dir / "src", dir / "mnt",
              {"--data-path", "passthrough", "--cache-size", "1M", "--cache-reserve", "0"});
  check_same(mount / "f0", dir / "src/f0");
  wait_for_staging(mount);
  const int fd = ::open((mount / "f0").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  // This open reads the copy (the miss before it may have read the source with passthrough).
  CHECK(stat_of(mount, "data_path.passthrough_opens") -
            stat_of(mount, "data_path.source_passthrough_opens") ==
        1);
  std::string got(kSize, '\0');
  REQUIRE(::pread(fd, got.data(), kSize / 2, 0) == static_cast<ssize_t>(kSize / 2));
  // Every other file through a cache of 2.5 files: copies come and go around the open one.
  for (int i = 1; i < 12; ++i) {
    check_same(mount / ("f" + std::to_string(i)), dir / ("src/f" + std::to_string(i)));
  }
  wait_for_staging(mount);
  REQUIRE(tools::drop_page_cache());
  REQUIRE(::pread(fd, got.data() + kSize / 2, kSize / 2, kSize / 2) ==
          static_cast<ssize_t>(kSize / 2));
  ::close(fd);
  std::string want(kSize, '\0');
  tools::fill_content(0, 1, 0, want.data(), want.size());
  CHECK(got == want);
  CHECK(stat_of(mount, "cache.used_bytes") <= 1 << 20);
  CHECK(stat_of(mount, "cache.evictions") > 0);
}

TEST_CASE("a file changed in the source is read anew, not from the old backing file",
          "[mount][passthrough]") {
  TempDir dir;
  write_files(dir / "src", 1, 110000);
  Mount mount(dir / "src", dir / "mnt", kPassthrough);
  read_twice(mount, dir / "src", 1);
  CHECK(stat_of(mount, "data_path.passthrough_opens") -
            stat_of(mount, "data_path.source_passthrough_opens") ==
        1);
  // Hold a passthrough open of the old version while the source changes.
  const int old_fd = ::open((mount / "f0").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(old_fd >= 0);
  write_files(dir / "src", 1, 120000, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the attribute timeout
  check_same(mount / "f0", dir / "src/f0");
  std::string old_bytes(110000, '\0');
  CHECK(::pread(old_fd, old_bytes.data(), old_bytes.size(), 0) == 110000);
  ::close(old_fd);
  std::string want(110000, '\0');
  tools::fill_content(0, 1, 0, want.data(), want.size());
  CHECK(old_bytes == want);  // the open that came first keeps its version
}

TEST_CASE("a reopen of a passthrough file replaced in the source reads the new bytes",
          "[mount][passthrough]") {
  SKIP_WITHOUT_PASSTHROUGH();
  TempDir dir;
  write_files(dir / "src", 1, 110000);
  Mount mount(dir / "src", dir / "mnt", kPassthrough);
  read_twice(mount, dir / "src", 1);
  const int old_fd = ::open((mount / "f0").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(old_fd >= 0);
  write_files(dir / "src", 1, 120000, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the attribute timeout
  // The same inode opened again (no lookup): the open finds the new version while the old
  // one's backing file is the inode's.
  const std::string again = "/proc/self/fd/" + std::to_string(old_fd);
  std::string got(130000, '\0');
  const int new_fd = ::open(again.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(new_fd >= 0);
  const ssize_t n = ::pread(new_fd, got.data(), got.size(), 0);
  ::close(new_fd);
  std::string old_bytes(110000, '\0');
  CHECK(::pread(old_fd, old_bytes.data(), old_bytes.size(), 0) == 110000);
  ::close(old_fd);
  REQUIRE(n == 120000);
  got.resize(120000);
  CHECK(got == read_file(dir / "src/f0").value());
  std::string want(110000, '\0');
  tools::fill_content(0, 1, 0, want.data(), want.size());
  CHECK(old_bytes == want);  // the first open keeps its version
}

}  // namespace epochfs::test
