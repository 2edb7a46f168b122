// Mounting, unmounting and the daemon's life: clear errors, clean exits, no leftovers.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "test/mount/source_tree.h"
#include "tools/cli/mount_table.h"
#include "tools/lab/process.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

// A directory like the cache a dead mount left (docs/cache-format.md): a lock nobody holds and
// a copy; with kept, the index of --keep-cache too.
void make_dead_cache(const std::string& dir, bool kept = false) {
  fs::create_directories(dir + "/ab");
  std::ofstream(dir + "/lock").flush();
  std::ofstream(dir + "/ab/ab000000000000000000000000000000") << "old copy";
  if (kept) {
    std::ofstream(dir + "/index") << "epochfs-cache-index 1\n";
  }
}

// The names in dir, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

size_t lines_with(const std::string& text, const std::string& needle) {
  size_t n = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    n += text.substr(begin, end - begin).find(needle) != std::string::npos ? 1 : 0;
    begin = end + 1;
  }
  return n;
}

}  // namespace

TEST_CASE("mount daemonizes once the mount is ready, unmount ends it", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  const CommandResult mounted =
      run_epochfs({"mount", dir / "src", dir / "mnt", "--cache-dir", dir / "cache"});
  REQUIRE(mounted.exit_code == 0);
  // Usable the moment the command returns.
  CHECK(read_file(dir / "mnt/hello.txt") == "hello");
  const CommandResult unmounted = run_epochfs({"unmount", dir / "mnt"});
  INFO(unmounted.output);
  CHECK(unmounted.exit_code == 0);
  CHECK_FALSE(is_mounted(dir / "mnt"));
}

TEST_CASE("the daemon exits 0 after unmount and after SIGTERM or SIGINT", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  SECTION("epochfs unmount") {
    Mount mount(dir / "src", dir / "mnt");
    CHECK(read_file(mount / "hello.txt") == "hello");
    CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
    CHECK(mount.wait_exit() == 0);
    CHECK_FALSE(is_mounted(mount.path()));
  }
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    DYNAMIC_SECTION("signal " << sig) {
      Mount mount(dir / "src", dir / "mnt");
      CHECK(read_file(mount / "hello.txt") == "hello");
      REQUIRE(kill(mount.pid(), sig) == 0);
      // A second signal while the first is being handled changes nothing.
      kill(mount.pid(), sig);
      CHECK(mount.wait_exit() == 0);
      CHECK_FALSE(is_mounted(mount.path()));
      // Its cache directory went with it.
      CHECK((!fs::exists(mount.cache_root()) || fs::is_empty(mount.cache_root())));
    }
  }
}

TEST_CASE("unmount returns while the daemon still removes its cache, which leaves nothing",
          "[mount][lifecycle]") {
  // Unlinking a million copies takes minutes: the daemon renames its directory away first,
  // and `epochfs unmount` returns once it has (after 2 s). Here the cache disk holds every
  // unlink in the trash, so the removal cannot end before the test lets it.
  TempDir dir;
  write_files(dir / "data", 10, 50'000);
  fs::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "data", dir / "mnt", {"--cache-dir", disk.path()});
  check_files(mount.path(), dir / "data", 10);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == 10);
  disk.set_rules("unlink /.trash.* hang\n");
  const CommandResult unmounted = run_epochfs({"unmount", mount.path()});
  INFO(unmounted.output);
  CHECK(unmounted.exit_code == 0);
  CHECK(contains(unmounted.output, "goes on removing its cache"));
  CHECK_FALSE(is_mounted(mount.path()));
  CHECK(::kill(mount.pid(), 0) == 0);
  const auto left = names_in(dir / "cachedisk");
  REQUIRE(left.size() == 1);
  CHECK(left[0].rfind(".trash.", 0) == 0);
  disk.set_rules("");
  disk.release();
  CHECK(mount.wait_exit() == 0);
  CHECK(fs::is_empty(dir / "cachedisk"));
}

TEST_CASE("an unmount from outside or an aborted connection ends the daemon cleanly",
          "[mount][lifecycle]") {
  TempDir dir;
  write_files(dir / "src", 200, 50'000);
  Mount mount(dir / "src", dir / "mnt");
  // Staging is busy: an order of every file.
  std::string order;
  for (int i = 0; i < 200; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  REQUIRE(publish(mount, order) == 0);
  CHECK(read_file(mount / "f0").has_value());
  SECTION("fusermount3 -u") {
    CHECK(run_command({"fusermount3", "-u", mount.path()}).exit_code == 0);
  }
  SECTION("umount") { CHECK(run_command({"umount", mount.path()}).exit_code == 0); }
  SECTION("the connection aborted through fusectl, under an open file") {
    cachestore::UniqueFd open_file(::open((mount / "f1").c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(open_file.valid());
    const auto connection = tools::fuse_connection_at(mount.path());
    REQUIRE(connection.has_value());
    REQUIRE(tools::abort_fuse_connection(*connection));
    char buf[16];
    const ssize_t n = ::read(open_file.get(), buf, sizeof(buf));
    if (n >= 0) {
      // A passthrough open: the kernel reads the file it holds, with no daemon to ask.
      const char* data_path = getenv("EPOCHFS_TEST_DATA_PATH");
      CHECK((data_path != nullptr && std::string(data_path) == "passthrough"));
      CHECK(n == sizeof(buf));
    } else {
      CHECK(errno == ENOTCONN);
    }
    CHECK(::umount2(mount.path().c_str(), MNT_DETACH) == 0);
  }
  CHECK(mount.wait_exit() == 0);
  CHECK_FALSE(is_mounted(mount.path()));
  CHECK((!fs::exists(mount.cache_root()) || fs::is_empty(mount.cache_root())));
}

TEST_CASE("the daemon removes its cache only once the kernel has let go of the mount",
          "[mount][lifecycle]") {
  // Detached with a file open, then its connection aborted: the daemon's loop ends while the
  // kernel still holds the mount, until that file closes. The cache waits for it
  // (fusefs/kernel_teardown.h): removing a million copies slowed the kernel's own teardown.
  TempDir dir;
  write_files(dir / "src", 20, 10'000);
  Mount mount(dir / "src", dir / "mnt", {"--log-file", dir / "log", "--log-level", "info"});
  check_files(mount.path(), dir / "src", 20);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == 20);
  const auto connection = tools::fuse_connection_at(mount.path());
  REQUIRE(connection.has_value());
  auto open_file =
      std::make_unique<cachestore::UniqueFd>(::open((mount / "f0").c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(open_file->valid());
  REQUIRE(::umount2(mount.path().c_str(), MNT_DETACH) == 0);
  REQUIRE(tools::abort_fuse_connection(*connection));
  const std::string log = dir / "log";
  for (int i = 0; i < 3000 && lines_with(read_file(log).value_or(""), "unmounting") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(lines_with(read_file(log).value_or(""), "unmounting") == 1);
  size_t copies = 0;
  for (const auto& e : fs::recursive_directory_iterator(mount.cache_root())) {
    copies += e.is_regular_file() && e.path().filename() != "lock" ? 1 : 0;
  }
  CHECK(copies == 20);  // the whole cache, kept while the kernel holds the mount
  CHECK(::kill(mount.pid(), 0) == 0);
  open_file.reset();
  CHECK(mount.wait_exit() == 0);
  const std::string said = read_file(log).value_or("");
  const size_t let_go = said.find("the kernel let go of the mount after");
  REQUIRE(let_go != std::string::npos);
  const size_t removing = said.find("removing the cache directory");
  REQUIRE(removing != std::string::npos);
  CHECK(removing > let_go);
  CHECK((!fs::exists(mount.cache_root()) || fs::is_empty(mount.cache_root())));
}

TEST_CASE("mount refuses a cache directory it cannot or must not use", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  std::ofstream(dir / "a-file") << "x";
  Tmpfs read_only(dir / "ro", "size=1M", MS_RDONLY);
  Tmpfs private_read_only(dir / "ro700", "size=1M,mode=0700", MS_RDONLY);

  struct Case {
    std::string cache_dir;
    std::string says;
  };

  const std::vector<Case> cases = {
      {dir / "a-file", "cannot use the cache directory"},
      {dir / "ro/cache", "cannot use the cache directory"},
      {dir / "ro700",
       "cannot make a mount's directory in " + dir / "ro700" + ": Read-only file system"},
      {dir / "src/cache", "inside the source"},
      {dir / "src", "inside the source"},
      {dir / "mnt/cache", "inside the mountpoint"},
  };
  for (const auto& c : cases) {
    const auto before = list_tree(dir.path());
    const CommandResult r =
        run_epochfs({"mount", dir / "src", dir / "mnt", "--cache-dir", c.cache_dir});
    INFO(c.cache_dir << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, c.says));
    CHECK_FALSE(contains(r.output, ".new."));  // no name of epochfs's own in the message
    CHECK_FALSE(is_mounted(dir / "mnt"));
    // Nothing was made.
    CHECK(list_tree(dir.path()) == before);
  }
}

TEST_CASE("a cache directory shared with other files: only epochfs's own directory goes",
          "[mount][lifecycle]") {
  TempDir dir;
  write_files(dir / "src", 3, 50000);
  // A directory already in use (a home-like tree): files, a hidden file, a nested tree, a
  // symlink out, and a directory that looks like a cache of another mount's.
  const std::string shared = dir / "home";
  fs::create_directories(shared + "/projects/data");
  std::ofstream(shared + "/notes.txt") << "mine";
  std::ofstream(shared + "/.profile") << "export X=1";
  std::ofstream(shared + "/projects/data/train.csv") << "a,b\n1,2\n";
  fs::create_symlink(dir / "src", shared + "/link-to-src");
  fs::create_directories(shared + "/0123456789abcdef.1");
  std::ofstream(shared + "/0123456789abcdef.1/keep") << "not epochfs's";
  const auto before = list_tree(shared);
  for (const bool keep : {false, true}) {
    INFO("--keep-cache " << keep);
    std::vector<std::string> args = {"--cache-dir", shared};
    if (keep) {
      args.push_back("--keep-cache");
    }
    {
      Mount mount(dir / "src", dir / "mnt", args);
      check_files(mount.path(), dir / "src", 3);
      wait_for_staging(mount);
      CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
      CHECK(mount.wait_exit() == 0);
    }
    auto after = list_tree(shared);
    if (keep) {
      // The kept cache is one directory of epochfs's own: take it out, the rest is as it was.
      std::vector<std::string> extra;
      std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                          std::back_inserter(extra));
      REQUIRE_FALSE(extra.empty());
      const std::string kept = extra.front().substr(0, extra.front().find('/'));
      for (const auto& p : extra) {
        CHECK(p.substr(0, p.find('/')) == kept);
      }
      fs::remove_all(shared + "/" + kept);
      after = list_tree(shared);
    }
    CHECK(after == before);
    CHECK(read_file(shared + "/notes.txt") == "mine");
    CHECK(read_file(dir / "src/f0").has_value());
  }
}

TEST_CASE("without --allow-other, other users reach nothing, stats included",
          "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  Mount mount(dir / "src", dir / "mnt");
  const auto open_as_nobody = [](const std::string& path) {
    return run_as_nobody([&] {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      return fd < 0 ? errno : 0;
    });
  };
  CHECK(open_as_nobody(mount / "hello.txt") == EACCES);
  CHECK(open_as_nobody(mount / ".epochfs/stats") == EACCES);
  CHECK(open_as_nobody(mount / ".epochfs/metrics") == EACCES);
  CHECK(read_file(mount / "hello.txt") == "hello");
}

TEST_CASE("mount refuses bad arguments with a one-line reason", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");

  struct Case {
    std::vector<std::string> args;
    std::string says;
  };

  fs::create_directories(dir / "src/inner");
  fs::create_directories(dir / "full");
  std::ofstream(dir / "full/a-file") << "x";
  const std::vector<Case> cases = {
      {{"mount", dir / "missing", dir / "mnt"}, "source"},
      {{"mount", dir / "src/hello.txt", dir / "mnt"}, "not a directory"},
      {{"mount", dir / "src", dir / "nowhere"}, "mountpoint"},
      {{"mount", dir / "src", dir / "src/hello.txt"}, "not a directory"},
      {{"mount", dir / "src"}, "mountpoint"},
      {{"mount", dir / "src", dir / "mnt", "--threads", "0"}, "threads"},
      {{"mount", dir / "src", dir / "mnt", "-o", "no_such_option"}, "no_such_option"},
      {{"mount", dir / "src", dir / "mnt", "--lookahead", "soon"}, "--lookahead soon"},
      {{"mount", dir / "src", dir / "mnt", "--stage-threads", "0"}, "stage-threads"},
      {{"mount", dir / "src", dir / "mnt", "--shuffle-file", dir / "no/dir/order.txt"},
       "its directory does not exist"},
      {{"mount", dir / "src", dir / "src/inner"}, "inside the source"},
      {{"mount", dir / "src", dir / "full"}, "is not empty"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run_epochfs(c.args);
    INFO(c.args.back() << ": " << r.output);
    CHECK(r.exit_code != 0);
    CHECK(contains(r.output, c.says));
    CHECK_FALSE(contains(r.output, ".new."));  // no name of epochfs's own in the message
    CHECK_FALSE(is_mounted(dir / "mnt"));
    CHECK_FALSE(is_mounted(dir / "src/inner"));
    CHECK_FALSE(is_mounted(dir / "full"));
  }
}

TEST_CASE("mount refuses a mountpoint that is already mounted", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt");
  const CommandResult r =
      run_epochfs({"mount", dir / "src", mount.path(), "--cache-dir", dir / "cache"});
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "already a mount point"));
  CHECK(read_file(mount / "hello.txt") == "hello");
}

TEST_CASE("unmount of a busy mount says so and offers --lazy", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt");
  {
    cachestore::UniqueFd held(::open((mount / "hello.txt").c_str(), O_RDONLY));
    REQUIRE(held.valid());
    const CommandResult busy = run_epochfs({"unmount", mount.path()});
    CHECK(busy.exit_code == 1);
    CHECK(contains(busy.output, "busy"));
    CHECK(contains(busy.output, "--lazy"));
    CHECK(is_mounted(mount.path()));
    CHECK(run_epochfs({"unmount", "--lazy", mount.path()}).exit_code == 0);
    CHECK_FALSE(is_mounted(mount.path()));
    // The open file still reads, whole and right, after the lazy detach.
    char buf[8] = {};
    CHECK(::pread(held.get(), buf, sizeof(buf), 0) == 5);
    CHECK(std::string(buf, 5) == "hello");
  }
  // The daemon leaves after the last close, and takes its cache directory with it.
  CHECK(mount.wait_exit() == 0);
  CHECK((!fs::exists(mount.cache_root()) || fs::is_empty(mount.cache_root())));
}

TEST_CASE("unmount of something that is not an epochfs mount fails clearly", "[mount][lifecycle]") {
  TempDir dir;
  fs::create_directories(dir / "plain");
  const CommandResult r = run_epochfs({"unmount", dir / "plain"});
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "not mounted"));
}

TEST_CASE("a mount left by a killed daemon is detached by the next mount", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt");
  REQUIRE(kill(mount.pid(), SIGKILL) == 0);
  CHECK(mount.wait_exit() == 128 + SIGKILL);
  struct stat st;
  CHECK(::stat(mount.path().c_str(), &st) == -1);
  CHECK(errno == ENOTCONN);
  const CommandResult again =
      run_epochfs({"mount", dir / "src", mount.path(), "--cache-dir", dir / "cache"});
  CHECK(again.exit_code == 0);
  CHECK(contains(again.output, "stale mount whose daemon died; detached it"));
  CHECK(read_file(mount / "hello.txt") == "hello");
  CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
  CHECK_FALSE(is_mounted(mount.path()));
}

TEST_CASE("a stale mount of another filesystem is left alone", "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  // A FUSE mount of another type whose daemon dies: slowfs stands in for it.
  SlowSource other(dir / "src", dir / "mnt", 0);
  REQUIRE(kill(other.pid(), SIGKILL) == 0);
  // Let the kernel see the connection close.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const CommandResult again = run_epochfs({"mount", dir / "src", dir / "mnt", "--no-cache"});
  CHECK(again.exit_code == 1);
  CHECK(contains(again.output, "umount -l"));
}

TEST_CASE("a root-like cache directory: only epochfs's own directory goes, after a crash too",
          "[mount][lifecycle]") {
  // docs/reliability.md K9 with a `/`-like directory: a system-like tree that also holds the
  // source and the mountpoint. A crash leaves the mount's directory; the next mount removes
  // it, and its unmount its own. Nothing else in the tree may change.
  TempDir dir;
  const std::string root = dir.path();
  write_files(root + "/src", 3, 50000);
  for (const char* d : {"etc", "usr/bin", "var/cache/apt", "home/user/.cache", "tmp", "mnt"}) {
    fs::create_directories(root + "/" + d);
  }
  std::ofstream(root + "/etc/passwd") << "root:x:0:0::/root:/bin/sh\n";
  std::ofstream(root + "/usr/bin/tool") << "#!/bin/sh\n";
  std::ofstream(root + "/var/cache/apt/pkgcache.bin") << "cache of another program";
  std::ofstream(root + "/home/user/.cache/thumb") << "x";
  std::ofstream(root + "/tmp/.X0-lock") << "1";
  fs::create_directory_symlink("usr/bin", root + "/bin");
  fs::create_directories(root + "/fedcba9876543210.42");  // named like another mount's cache
  std::ofstream(root + "/fedcba9876543210.42/keep") << "not epochfs's";
  const auto before = list_tree(root);
  const std::vector<std::string> args = {"--cache-dir", root};
  {
    Mount mount(root + "/src", root + "/mnt", args);
    check_files(mount.path(), root + "/src", 3);
    wait_for_staging(mount);
    REQUIRE(::kill(mount.pid(), SIGKILL) == 0);
    mount.wait_exit();
    ::umount2(mount.path().c_str(), MNT_DETACH);
  }
  CHECK(list_tree(root) != before);  // the dead daemon's directory
  {
    Mount mount(root + "/src", root + "/mnt", args);
    check_files(mount.path(), root + "/src", 3);
    wait_for_staging(mount);
    CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
    CHECK(mount.wait_exit() == 0);
  }
  CHECK(list_tree(root) == before);
  CHECK(read_file(root + "/fedcba9876543210.42/keep") == "not epochfs's");
}

TEST_CASE("a mount removes the caches dead mounts of other sources left on its --cache-dir",
          "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  const std::string cache = dir / "cache";
  const std::string dead = cache + "/0123456789abcdef.4242-17";
  const std::string kept = cache + "/fedcba9876543210.4243-18";
  make_dead_cache(dead);
  make_dead_cache(kept, true);
  {
    Mount mount(dir / "src", dir / "mnt", {"--cache-dir", cache});
    // Renamed out of the way before the mount was ready, and removed in the background once
    // the mount has made its first copy.
    CHECK_FALSE(fs::exists(dead));
    CHECK(read_file(mount / "hello.txt") == "hello");
    wait_for_staging(mount);
    auto trash = [&cache] {
      const auto names = names_in(cache);
      return std::count_if(names.begin(), names.end(),
                           [](const std::string& n) { return n.rfind(".trash.", 0) == 0; });
    };
    for (int i = 0; i < 2000 && trash() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(trash() == 0);
    // A kept cache of another source waits for that source.
    CHECK(read_file(kept + "/ab/ab000000000000000000000000000000") == "old copy");
    CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
    CHECK(mount.wait_exit() == 0);
  }
  CHECK(names_in(cache) == std::vector<std::string>{"fedcba9876543210.4243-18"});
}

TEST_CASE("epochfs clean removes what dead mounts left, nothing live, nothing else",
          "[mount][lifecycle]") {
  TempDir dir;
  make_small_source(dir / "src");
  const std::string cache = dir / "cache";
  Mount live(dir / "src", dir / "mnt", {"--cache-dir", cache});
  const auto live_dirs = names_in(cache);
  REQUIRE(live_dirs.size() == 1);
  const std::string live_dir = cache + "/" + live_dirs.front();
  // The live mount's own cleaner looks at the cache directory once, at start: wait until it is
  // done, or it may take the trash made below before `epochfs clean` does.
  const auto cleaner_running = [&] {
    const std::string tasks = "/proc/" + std::to_string(live.pid()) + "/task";
    std::error_code ec;
    for (const auto& t : fs::directory_iterator(tasks, ec)) {
      if (read_file(t.path() / "comm").value_or("").rfind("epochfs-cleaner", 0) == 0) {
        return true;
      }
    }
    return false;
  };
  // It may not have started when the mount is up, and may be gone before the first look:
  // watch for up to 2 s for it to come, then until it has gone.
  bool seen = false;
  for (int i = 0; i < 1000; ++i) {
    const bool running = cleaner_running();
    seen = seen || running;
    if ((seen && !running) || (!seen && i >= 200)) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_FALSE(cleaner_running());
  // Left once the live mount has started, so that only `epochfs clean` removes them: a dead
  // mount's cache, and the trash of a removal cut short.
  const std::string dead = cache + "/0123456789abcdef.4242-17";
  const std::string trash = cache + "/.trash.0123456789abcdee.4244-19";
  make_dead_cache(dead);
  make_dead_cache(trash);
  // Not epochfs's: a directory named like a cache but without a lock, and a file.
  fs::create_directories(cache + "/0123456789abcdef.1");
  std::ofstream(cache + "/0123456789abcdef.1/keep") << "not epochfs's";
  std::ofstream(cache + "/notes.txt") << "mine";
  const auto before = names_in(cache);

  const CommandResult dry = run_epochfs({"clean", "--cache-dir", cache, "--dry-run"});
  INFO(dry.output);
  CHECK(dry.exit_code == 0);
  CHECK(lines_with(dry.output, "would remove") == 3);  // one per directory, and the total
  CHECK(lines_with(dry.output, dead + " (dead mount)") == 1);
  CHECK(lines_with(dry.output, trash + " (") == 1);
  CHECK(lines_with(dry.output, "would remove 2 directories") == 1);
  CHECK(lines_with(dry.output, live_dir) == 0);
  CHECK(names_in(cache) == before);

  const CommandResult real = run_epochfs({"clean", "--cache-dir", cache});
  INFO(real.output);
  CHECK(real.exit_code == 0);
  CHECK(lines_with(real.output, "removed") == 3);
  CHECK(lines_with(real.output, "removed 2 directories") == 1);
  std::vector<std::string> kept = {"0123456789abcdef.1", live_dirs.front(), "notes.txt"};
  std::sort(kept.begin(), kept.end());
  CHECK(names_in(cache) == kept);
  CHECK(fs::is_regular_file(live_dir + "/lock"));
  CHECK(read_file(cache + "/0123456789abcdef.1/keep") == "not epochfs's");
  CHECK(read_file(live / "hello.txt") == "hello");
  // Nothing left to do.
  const CommandResult again = run_epochfs({"clean", "--cache-dir", cache});
  CHECK(again.exit_code == 0);
  CHECK(lines_with(again.output, "removed 0 directories") == 1);
  CHECK(real.output.find('\r') == std::string::npos);  // no progress line but on a terminal
  // On a terminal (script(1) gives it one) a removal is announced while it runs, then wiped.
  // script's own input is /dev/null: with none at all (a CI job's) it would print nothing.
  make_dead_cache(dead);
  const CommandResult on_tty =
      run_command({"sh", "-c",
                   "script -qec '" + std::string(EPOCHFS_BINARY) + " clean --cache-dir " + cache +
                       "' /dev/null </dev/null"});
  INFO(on_tty.output);
  CHECK(on_tty.exit_code == 0);
  CHECK(on_tty.output.find("\rremoving " + dead) != std::string::npos);
  CHECK(on_tty.output.find("\r\033[K") != std::string::npos);
  CHECK(lines_with(on_tty.output, "removed 1 directory") == 1);
}

TEST_CASE("the daemon's threads are named for their role", "[mount][lifecycle]") {
  TempDir dir;
  write_files(dir / "src", 2, 10000);
  Mount mount(dir / "src", dir / "mnt");
  REQUIRE(read_file(mount / "f0").has_value());  // a miss: a copy on the stager
  std::set<std::string> names;
  const std::string tasks = "/proc/" + std::to_string(mount.pid()) + "/task";
  const auto all_seen = [&] {
    return names.count("epochfs-fuse") + names.count("epochfs-plan") +
               names.count("epochfs-stage") ==
           3;
  };
  // Each thread names itself when it starts running: wait for all three (slower under ASan).
  for (int i = 0; i < 500 && !all_seen(); ++i) {
    std::error_code ec;
    for (const auto& t : fs::directory_iterator(tasks, ec)) {
      std::string comm = read_file(t.path() / "comm").value_or("");
      names.insert(comm.substr(0, comm.find('\n')));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO(names.size());
  CHECK(names.count("epochfs-fuse") == 1);
  CHECK(names.count("epochfs-plan") == 1);
  CHECK(names.count("epochfs-stage") == 1);
}

}  // namespace epochfs::test
