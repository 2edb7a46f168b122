// --data-path no-open (fusefs/implicit_opens.h) and auto on real mounts: the kernel opens files
// without asking, so a file whose pages are cached never reaches the daemon; reads that do
// come are served byte for byte; control files stay live; orders publish at fsync only, with
// their verdict; an open for writing succeeds but nothing is written. The cache and parity
// tests also run once with no-open (test/CMakeLists.txt).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/process.h"
#include "tools/lab/read_bench.h"

namespace epochfs::test {
namespace {

const std::vector<std::string> kNoOpen = {"--data-path", "no-open"};

std::string mode_of(const Mount& mount) {
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  return doc->values["data_path.mode"];
}

}  // namespace

TEST_CASE("with no-open cached pages serve reads without the daemon, byte for byte",
          "[mount][no-open]") {
  TempDir dir;
  write_files(dir / "src", 20, 300000);  // several READs per file: one open serves them
  Mount mount(dir / "src", dir / "mnt", kNoOpen);
  CHECK(mode_of(mount) == "no-open");
  check_files(mount.path(), dir / "src", 20);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "opens") == 20);
  CHECK(stat_of(mount, "misses") == 20);
  REQUIRE(tools::drop_page_cache());
  check_files(mount.path(), dir / "src", 20);
  CHECK(stat_of(mount, "hits") == 20);
  CHECK(stat_of(mount, "bytes_from_cache") == 20 * 300000);
  // Hot: the kernel has every page and asks nothing.
  check_files(mount.path(), dir / "src", 20);
  CHECK(stat_of(mount, "opens") == 40);
}

TEST_CASE("with no-open stats are live and orders publish at fsync, refusals reported",
          "[mount][no-open]") {
  TempDir dir;
  write_files(dir / "src", 5, 1000);
  Mount mount(dir / "src", dir / "mnt", kNoOpen);
  check_same(mount / "f0", dir / "src/f0");  // the first open: no OPEN is sent from now on
  CHECK(stat_of(mount, "opens") == 1);
  check_same(mount / "f1", dir / "src/f1");
  CHECK(stat_of(mount, "opens") == 2);  // a new read of stats sees the new figure

  std::ofstream(dir / "good.txt") << "f3\nf4\n";
  auto good = run_epochfs({"publish", mount.path(), dir / "good.txt"});
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("2 entries published") != std::string::npos);
  std::ofstream(dir / "cut.txt") << "#count 5\nf1\n";
  auto cut = run_epochfs({"publish", mount.path(), dir / "cut.txt"});
  CHECK(cut.exit_code == 1);
  CHECK(cut.output.find("cut short") != std::string::npos);
  CHECK(stat_of(mount, "prefetch.publishes") == 2);
  // A plain copy does not publish: under no-open the kernel sends neither FLUSH (stopped for
  // the mount at the first close) nor RELEASE, so the daemon never learns it was closed. This
  // check once waited for the count of 2 that the two publishes above had already made.
  CHECK(run_command({"cp", dir / "good.txt", mount / ".epochfs/order"}).exit_code == 0);
  usleep(300000);
  CHECK(stat_of(mount, "prefetch.publishes") == 2);
}

TEST_CASE("with no-open an open for writing succeeds but nothing is written", "[mount][no-open]") {
  TempDir dir;
  write_files(dir / "src", 2, 1000);
  Mount mount(dir / "src", dir / "mnt", kNoOpen);
  check_same(mount / "f0", dir / "src/f0");
  cachestore::UniqueFd fd(::open((mount / "f1").c_str(), O_WRONLY));
  REQUIRE(fd.valid());
  errno = 0;
  CHECK(::write(fd.get(), "x", 1) == -1);
  CHECK(errno == EROFS);
  fd.reset();
  check_same(mount / "f1", dir / "src/f1");
}

TEST_CASE("auto reads cached files through the kernel where it can, else classic",
          "[mount][passthrough]") {
  TempDir dir;
  write_files(dir / "src", 3, 50000);
  SECTION("the kernel offers passthrough") {
    SKIP_WITHOUT_PASSTHROUGH();
    Mount mount(dir / "src", dir / "mnt", {"--data-path", "auto"});
    CHECK(mode_of(mount) == "passthrough");
    check_files(mount.path(), dir / "src", 3);
  }
  SECTION("it does not") {
    REQUIRE(setenv("EPOCHFS_TEST_DENY_PASSTHROUGH", "1", 1) == 0);
    Mount mount(dir / "src", dir / "mnt", {"--data-path", "auto"});
    unsetenv("EPOCHFS_TEST_DENY_PASSTHROUGH");
    CHECK(mode_of(mount) == "classic");
    check_files(mount.path(), dir / "src", 3);
  }
}

TEST_CASE("with no-open a verify hung on the cache disk holds up no read of stats",
          "[mount][no-open]") {
  // Control-file snapshots are made outside the lock that every control node's LOOKUP,
  // GETATTR and FORGET take: before, a slow verify (it hashes the whole cache) parked them all.
  TempDir dir;
  write_files(dir / "src", 5, 10000);
  std::filesystem::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "src", dir / "mnt", {"--data-path", "no-open", "--cache-dir", disk.path()});
  check_files(mount.path(), dir / "src", 5);
  wait_for_staging(mount);
  REQUIRE(tools::drop_page_cache());
  disk.set_rules("read /* hang\n");
  const pid_t verifier = ::fork();
  if (verifier == 0) {
    _exit(read_file(mount / ".epochfs/verify") ? 0 : 1);
  }
  REQUIRE(verifier > 0);
  // Until faultfs has counted the hang: the verify is then stuck on the cache disk.
  const auto injected = [&] {
    const std::string s = disk.stats();
    const size_t at = s.find("\"injected\": ");
    return at == std::string::npos ? 0 : std::stoi(s.substr(at + 12));
  };
  for (int i = 0; i < 1000 && injected() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(injected() > 0);
  const pid_t reader = ::fork();
  if (reader == 0) {
    _exit(read_file(mount / ".epochfs/stats") ? 0 : 1);
  }
  REQUIRE(reader > 0);
  // A bound, not a timing: the reader either finishes or is parked until the release below.
  const auto read_stats = tools::wait_exit(reader, std::chrono::seconds(20));
  disk.set_rules("");
  disk.release();
  if (!read_stats) {
    tools::wait_exit(reader, std::chrono::seconds(60));
  }
  CHECK(read_stats == std::optional<int>(0));
  CHECK(tools::wait_exit(verifier, std::chrono::seconds(60)) == std::optional<int>(0));
}

}  // namespace epochfs::test
