// Running epochfs on a node: mounting from /etc/fstab (the mount helper conventions),
// `epochfs doctor`, and the log file.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

// A mount made in the background (as mount(8) makes it): detached at the end of the test if
// the test did not unmount it, so a failing test leaves nothing behind.
class DetachAtEnd {
 public:
  explicit DetachAtEnd(std::string path) : path_(std::move(path)) {}

  ~DetachAtEnd() {
    if (is_mounted(path_)) {
      umount2(path_.c_str(), MNT_DETACH);
    }
  }

  DetachAtEnd(const DetachAtEnd&) = delete;
  DetachAtEnd& operator=(const DetachAtEnd&) = delete;

 private:
  std::string path_;
};

std::string binary_dir() { return fs::path(EPOCHFS_BINARY).parent_path().string(); }

std::string read_all(const std::string& path) { return read_file(path).value_or(""); }

}  // namespace

TEST_CASE("an fstab line mounts through mount.fuse3 and unmounts", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  // What mount(8) runs for `SRC MNT fuse.epochfs cache_dir=...,cache_size=10M,_netdev 0 0`;
  // mount.fuse3 finds `epochfs` in PATH.
  const CommandResult mounted =
      run_command({"env", "PATH=" + binary_dir() + ":/usr/sbin:/usr/bin:/sbin:/bin", "mount.fuse3",
                   dir / "src", dir / "mnt", "-t", "fuse.epochfs", "-o",
                   "cache_dir=" + dir / "cache" +
                       ",cache_size=10M,immutable,_netdev,nofail,x-systemd.automount"});
  INFO(mounted.output);
  REQUIRE(mounted.exit_code == 0);
  CHECK(read_file(dir / "mnt/hello.txt") == "hello");
  const std::string stats = read_all(dir / "mnt/.epochfs/stats");
  CHECK(contains(stats, "\"capacity_bytes\": 10485760"));
  CHECK(contains(stats, "\"dir\": \"" + dir / "cache/"));
  CHECK(run_epochfs({"unmount", dir / "mnt"}).exit_code == 0);
  CHECK_FALSE(is_mounted(dir / "mnt"));
  // The daemon has exited and removed its cache directory.
  CHECK(fs::is_empty(dir / "cache"));
}

TEST_CASE("epochfs called as mount.fuse.epochfs takes mount(8)'s arguments", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  const std::string helper = dir / "mount.fuse.epochfs";
  fs::create_symlink(EPOCHFS_BINARY, helper);
  const std::string opts = "rw,cache_dir=" + dir / "cache" + ",lookahead=0,no_cache";
  SECTION("-f only prints the mount command") {
    const CommandResult fake = run_command({helper, dir / "src", dir / "mnt", "-fv", "-o", opts});
    CHECK(fake.exit_code == 0);
    CHECK(contains(fake.output, "epochfs mount " + dir / "src" + " " + dir / "mnt" +
                                    " --cache-dir " + dir / "cache" + " --lookahead 0 --no-cache"));
    CHECK_FALSE(is_mounted(dir / "mnt"));
  }
  SECTION("it mounts, and libfuse's own options pass through") {
    const CommandResult r = run_command({helper, dir / "src", dir / "mnt", "-n", "-o",
                                         opts + ",nodev,nosuid", "-t", "fuse.epochfs"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_file(dir / "mnt/hello.txt") == "hello");
    CHECK(contains(read_all(dir / "mnt/.epochfs/stats"), "\"enabled\": false"));
    CHECK(run_epochfs({"unmount", dir / "mnt"}).exit_code == 0);
  }
  SECTION("a bad value is refused with the option's message") {
    const CommandResult r =
        run_command({helper, dir / "src", dir / "mnt", "-o", "cache_size=lots"});
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "--cache-size lots: expected a size"));
    CHECK_FALSE(is_mounted(dir / "mnt"));
  }
}

TEST_CASE("doctor says when the FUSE device is missing", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  const CommandResult r = run_epochfs(
      {"doctor", dir / "src", "--cache-dir", dir / "cache", "--fuse-device", dir / "no-fuse"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "PROBLEM  " + dir / "no-fuse" + " is missing: load the fuse module"));
  CHECK(contains(r.output, "1 problem(s) found"));
  // The rest was still checked.
  CHECK(contains(r.output, "source: open + first 64 KiB read"));
}

TEST_CASE("doctor says when the cache disk is full", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  Tmpfs small(dir / "small", "size=1M");
  {
    // Fill it up.
    std::ofstream fill(dir / "small/fill", std::ios::binary);
    const std::string block(64 * 1024, 'x');
    for (int i = 0; i < 64 && fill; ++i) {
      fill << block;
    }
  }
  const CommandResult r = run_epochfs({"doctor", dir / "src", "--cache-dir", dir / "small"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "PROBLEM  cache dir " + dir / "small" + " is full"));
  CHECK(contains(r.output, "is on tmpfs"));
}

TEST_CASE("doctor on a healthy mount and on a stale one", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt");
  const CommandResult healthy = run_epochfs({"doctor", mount.path()});
  INFO(healthy.output);
  CHECK(healthy.exit_code == 0);
  CHECK(contains(healthy.output, "is served by pid " + std::to_string(mount.pid())));
  CHECK(contains(healthy.output, "ok       cache dir " + mount.cache_root() + "/"));
  REQUIRE(kill(mount.pid(), SIGKILL) == 0);
  mount.wait_exit();
  const CommandResult stale = run_epochfs({"doctor", mount.path()});
  INFO(stale.output);
  CHECK(stale.exit_code == 1);
  CHECK(contains(stale.output, "is a stale mount: its daemon died"));
  // The kernel may still hold the root's attributes (doctor looked at it a moment ago): the next
  // mount still sees the mount is dead, and takes its place.
  DetachAtEnd guard(mount.path());
  CHECK(run_epochfs({"mount", dir / "src", mount.path(), "--no-cache"}).exit_code == 0);
  CHECK(read_file(mount / "hello.txt") == "hello");
  CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
}

TEST_CASE("a log file given by --log-file gets timestamped lines, also in the background",
          "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  const CommandResult r = run_epochfs(
      {"mount", dir / "src", dir / "mnt", "--no-cache", "--log-file", dir / "epochfs.log"});
  REQUIRE(r.exit_code == 0);
  CHECK(run_epochfs({"unmount", dir / "mnt"}).exit_code == 0);
  const std::string log = read_all(dir / "epochfs.log");
  INFO(log);
  CHECK(contains(log, "] info: serving " + dir / "src" + " at " + dir / "mnt"));
  CHECK(contains(log, "] info: unmounting " + dir / "mnt"));
  CHECK(log.substr(0, 2) == "20");
  const CommandResult bad = run_epochfs(
      {"mount", dir / "src", dir / "mnt", "--no-cache", "--log-file", dir / "no/such/dir/log"});
  CHECK(bad.exit_code == 1);
  CHECK(contains(bad.output, "--log-file " + dir / "no/such/dir/log: No such file or directory"));
}

}  // namespace epochfs::test
