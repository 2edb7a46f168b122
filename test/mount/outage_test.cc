// The shared storage goes away (docs/semantics.md, "When the source is down"): its client dies
// (ENOTCONN, as a soft-mounted NFS or a dead FUSE client answers) or hangs (a hard-mounted NFS
// whose server is down). Cached files keep being served, byte-identical; uncached ones wait
// for the source within --outage-wait, can be killed meanwhile, then fail with EIO; staging
// resumes when the source is back, and nothing stale is served after it.
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"

namespace epochfs::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSize = 100'000;
constexpr int kCached = 12;  // f0 .. f11 are cached; f12 .. f15 are not
constexpr int kFiles = 16;

// Page cache, dentries and inodes dropped: every read below reaches the daemon.
void drop_caches() {
  sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3";
}

std::string name(int i) { return "f" + std::to_string(i); }

// A mount over faults whose first kCached files are cached.
void cache_first_files(const Mount& mount, const std::string& data) {
  check_files(mount.path(), data, kCached);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == kCached);
}

bool source_down(const Mount& mount) {
  return contains(read_file(mount / ".epochfs/stats").value_or(""), "\"state\": \"down\"");
}

void wait_source_up(const Mount& mount) {
  for (int i = 0; i < 200 && source_down(mount); ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  REQUIRE_FALSE(source_down(mount));
}

// Every cached file reads whole and byte-identical through the mount.
void check_cached_served(const Mount& mount, const std::string& data) {
  for (int i = 0; i < kCached; ++i) {
    INFO(name(i));
    check_same(mount / name(i), data + "/" + name(i));
  }
}

// Reads path in a child process: its exit code is 0 on success, else the errno.
pid_t read_in_child(const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    auto bytes = read_file(path);
    _exit(bytes ? 0 : (errno == 0 ? 255 : errno));
  }
  return pid;
}

// The child's exit code once it exits, or nullopt if it is still running after timeout.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  int status = 0;
  while (Clock::now() < end) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("a dead source: cached files are served and uncached ones fail with EIO after the wait",
          "[mount][outage]") {
  const bool immutable = GENERATE(false, true);
  INFO("immutable " << immutable);
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  std::vector<std::string> args = {"--attr-timeout", "0.2", "--outage-wait", "2"};
  if (immutable) {
    args.push_back("--immutable");
  }
  Mount mount(faults.path(), dir / "mnt", args);
  cache_first_files(mount, dir / "data");
  faults.kill_daemon();
  drop_caches();
  std::this_thread::sleep_for(milliseconds(400));  // past the attribute timeout
  check_cached_served(mount, dir / "data");
  if (!immutable) {
    // Answered from the versions last checked. (--immutable never asks the source about a
    // file it knows, so it does not even notice the outage yet.)
    CHECK(source_down(mount));
    CHECK(stat_of(mount, "source_health.outage_answers") >= kCached);
  }
  // No copy: it waits --outage-wait for the source, then fails with EIO.
  const auto start = Clock::now();
  CHECK_FALSE(read_file(mount / name(kCached)).has_value());
  CHECK(errno == EIO);
  CHECK(Clock::now() - start < seconds(2 + 10));
  CHECK(source_down(mount));
  CHECK(stat_of(mount, "source_health.outages") == 1);
  CHECK(stat_of(mount, "source_health.outage_failures") == 1);
}

TEST_CASE("a hung source: cached files are served while uncached reads wait or fail or are killed",
          "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt",
              {"--attr-timeout", "0.2", "--source-timeout", "1", "--outage-wait", "4"});
  cache_first_files(mount, dir / "data");
  drop_caches();
  std::this_thread::sleep_for(milliseconds(400));
  faults.pause();
  check_cached_served(mount, dir / "data");
  CHECK(source_down(mount));
  CHECK(stat_of(mount, "source_health.timeouts") >= 1);

  SECTION("an uncached read waits for a source that comes back within the bound") {
    auto reader = std::async(std::launch::async, [&] { return read_file(mount / name(kCached)); });
    std::this_thread::sleep_for(milliseconds(1500));
    faults.resume();
    REQUIRE(reader.get().has_value());
    check_same(mount / name(kCached), dir / ("data/" + name(kCached)));
    CHECK(stat_of(mount, "source_health.outage_waits") >= 1);
    CHECK(stat_of(mount, "source_health.outage_failures") == 0);
  }
  SECTION("an uncached read fails with EIO when the source stays away past the bound") {
    const auto start = Clock::now();
    CHECK_FALSE(read_file(mount / name(kCached)).has_value());
    CHECK(errno == EIO);
    CHECK(Clock::now() - start < seconds(4 + 10));
    CHECK(stat_of(mount, "source_health.outage_failures") >= 1);
    faults.resume();
  }
  SECTION("a reader waiting for the source can be killed") {
    const pid_t child = read_in_child(mount / name(kCached));
    std::this_thread::sleep_for(milliseconds(500));
    CHECK_FALSE(wait_child(child, milliseconds(0)).has_value());  // still waiting
    kill(child, SIGKILL);
    const auto code = wait_child(child, seconds(3));  // well inside --outage-wait
    if (!code) {
      faults.resume();  // let it go, so the test ends
      waitpid(child, nullptr, 0);
    }
    REQUIRE(code.has_value());
    CHECK(*code == 128 + SIGKILL);
    CHECK(stat_of(mount, "source_health.interrupted") >= 1);
    faults.resume();
  }
  wait_source_up(mount);
  // Back: every file reads, the uncached ones from the source.
  check_files(mount.path(), dir / "data", kFiles);
}

TEST_CASE("one hung path costs only its own callers", "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  std::filesystem::create_directory(dir / "data/d");
  write_files(dir / "data/d", 1, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt",
              {"--attr-timeout", "0.2", "--source-timeout", "1", "--outage-wait", "4"});
  faults.set_rules("lookup /d/f0 hang\n");
  // A stat of the hung path, in a child: it waits and then fails, alone.
  const pid_t child = fork();
  if (child == 0) {
    struct stat st;
    _exit(::stat((mount / "d/f0").c_str(), &st) == 0 ? 0 : errno);
  }
  // Once its call has timed out and the root answered, the source is up for every other path:
  // uncached files read, the root lists, the stats say ok.
  for (int i = 0; i < 100 && stat_of(mount, "source_health.timeouts") < 1; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  REQUIRE(stat_of(mount, "source_health.timeouts") == 1);
  wait_source_up(mount);
  for (int i = 1; i < kFiles; ++i) {
    INFO(name(i));
    check_same(mount / name(i), dir / ("data/" + name(i)));
  }
  CHECK(std::distance(std::filesystem::directory_iterator(mount.path()),
                      std::filesystem::directory_iterator()) == kFiles + 1);
  CHECK(stat_of(mount, "source_health.outage_failures") == 0);
  // The hung one fails after its wait, with EIO; nothing else waited for it.
  const auto code = wait_child(child, seconds(20));
  if (!code) {
    faults.set_rules("");
    faults.release();
    waitpid(child, nullptr, 0);
  }
  REQUIRE(code.has_value());
  CHECK(*code == EIO);
  CHECK(stat_of(mount, "source_health.outage_failures") == 1);
  faults.set_rules("");
  faults.release();
}

TEST_CASE("a file whose read hangs while its stat answers is not called again", "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt",
              {"--attr-timeout", "0.2", "--source-timeout", "1", "--outage-wait", "3"});
  faults.set_rules("read /f3 hang\n");
  // Readers of f3 one after another: each fails after its wait. Only the first read reaches
  // the source (and perhaps the background copy's): every later call waits for those to
  // return instead of leaving one more daemon thread stuck in the source.
  std::optional<uint64_t> hung_calls;
  for (int reader = 0; reader < 3; ++reader) {
    const auto code = wait_child(read_in_child(mount / name(3)), seconds(20));
    REQUIRE(code.has_value());
    CHECK(*code == EIO);
    if (!hung_calls) {
      hung_calls = faults.injected();
    }
  }
  CHECK(faults.injected() == *hung_calls);
  CHECK(stat_of(mount, "source_health.timeouts") == 1);
  CHECK(stat_of(mount, "source_health.outages") == 1);  // no flipping down and up
  CHECK(stat_of(mount, "source_health.hung_paths") == 1);
  // The rest of the mount is up: other files read, the root lists.
  wait_source_up(mount);
  for (int i = 0; i < kFiles; ++i) {
    if (i != 3) {
      check_same(mount / name(i), dir / ("data/" + name(i)));
    }
  }
  // The hung read returns: f3 reads again.
  faults.set_rules("");
  faults.release();
  for (int i = 0; i < 100 && stat_of(mount, "source_health.hung_paths") > 0; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  CHECK(stat_of(mount, "source_health.hung_paths") == 0);
  check_same(mount / name(3), dir / ("data/" + name(3)));
}

TEST_CASE("a reader killed while it waits for a slow copy is reaped at once", "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", 1, 4 << 20);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt");
  // The copy of f0 makes progress (it is not given up on) but takes seconds: 0.2 s a read.
  faults.set_rules("read /f0 delay=200\n");
  REQUIRE(publish(mount, "f0\n") == 0);
  for (int i = 0; i < 100 && faults.injected() == 0; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  REQUIRE(faults.injected() > 0);  // the copy is running
  const pid_t child = read_in_child(mount / "f0");
  for (int i = 0; i < 100 && stat_of(mount, "opens") < 1; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::this_thread::sleep_for(milliseconds(300));  // in its wait for the copy
  kill(child, SIGKILL);
  const auto code = wait_child(child, seconds(3));
  // Reaped while the copy still runs: the wait did not outlast the reader.
  CHECK(stat_of(mount, "cache.files_cached") == 0);
  if (!code) {
    faults.set_rules("");
    waitpid(child, nullptr, 0);
  }
  REQUIRE(code.has_value());
  CHECK(*code == 128 + SIGKILL);
  faults.set_rules("");
  wait_for_staging(mount);
  check_same(mount / "f0", dir / "data/f0");
}

TEST_CASE("a source mounted again where it was is opened again by its path", "[mount][outage]") {
  // A network filesystem's client restarted: its old connection dead, a new mount in place.
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  std::optional<FaultFs> faults;
  faults.emplace(dir / "data", dir / "faulty");
  Mount mount(faults->path(), dir / "mnt", {"--attr-timeout", "0.2", "--outage-wait", "30"});
  cache_first_files(mount, dir / "data");
  faults->kill_daemon();
  drop_caches();
  std::this_thread::sleep_for(milliseconds(400));
  check_cached_served(mount, dir / "data");
  REQUIRE(source_down(mount));
  // An uncached read waits for the source meanwhile.
  auto reader = std::async(std::launch::async, [&] { return read_file(mount / name(kCached)); });
  faults.reset();  // unmounts the dead mount
  faults.emplace(dir / "data", dir / "faulty");
  REQUIRE(reader.get().has_value());
  wait_source_up(mount);
  CHECK(stat_of(mount, "source_health.outage_waits") >= 1);
  // The files did not change: their copies still serve them (the new mount's device number
  // reads as the old one's).
  std::this_thread::sleep_for(milliseconds(400));
  drop_caches();
  const double hits = stat_of(mount, "hits");
  check_cached_served(mount, dir / "data");
  CHECK(stat_of(mount, "hits") - hits == kCached);
  check_files(mount.path(), dir / "data", kFiles);
}

TEST_CASE("with --immutable the listings and directories survive an outage", "[mount][outage]") {
  // What ImageFolder does at start-up: list the tree, then open the files.
  TempDir dir;
  write_files(dir / "data/class_a", 6, kSize);
  write_files(dir / "data/class_b", 6, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt", {"--immutable", "--outage-wait", "1"});
  const auto names_in = [](const std::string& path) {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      names.insert(e.path().filename().string());
    }
    return names;
  };
  const auto root_before = names_in(mount.path());
  const auto a_before = names_in(mount / "class_a");
  check_files(mount / "class_a", dir / "data/class_a", 6);
  wait_for_staging(mount);
  faults.kill_daemon();
  drop_caches();
  CHECK(names_in(mount.path()) == root_before);
  CHECK(names_in(mount / "class_a") == a_before);
  check_files(mount / "class_a", dir / "data/class_a", 6);
  // A directory never listed before waits, then fails.
  std::error_code ec;
  std::filesystem::directory_iterator it(mount / "class_b", ec);
  CHECK(ec.value() == EIO);
}

TEST_CASE("staging pauses while the source is down and catches up when it returns",
          "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt", {"--attr-timeout", "0.2"});
  faults.set_rules("any /* errno=ENOTCONN\n");
  std::string order;
  for (int i = 0; i < kFiles; ++i) {
    order += name(i) + "\n";
  }
  REQUIRE(publish(mount, order) == 0);
  // Its entries' look-up in the source (what the order matched) ended at the outage: the
  // publish waited for nothing (it waited --outage-wait, 120 s, when it did).
  CHECK(stat_of(mount, "source_health.outage_waits") == 0);
  CHECK(stat_of(mount, "source_health.outage_failures") == 0);
  CHECK(stat_of(mount, "prefetch.last_publish.looked_up") == 0);
  for (int i = 0; i < 100 && !source_down(mount); ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  REQUIRE(source_down(mount));
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == 0);
  faults.set_rules("");
  wait_source_up(mount);
  wait_for_staging(mount);
  // Every file of the order was staged once the source answered: none was passed over.
  for (int i = 0; i < 100 && stat_of(mount, "cache.files_cached") < kFiles; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    wait_for_staging(mount);
  }
  CHECK(stat_of(mount, "cache.files_cached") == kFiles);
  check_files(mount.path(), dir / "data", kFiles);
  CHECK(stat_of(mount, "hits") == kFiles);
}

TEST_CASE("a file changed during an outage is not served stale once the source is back",
          "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt", {"--attr-timeout", "0.2"});
  cache_first_files(mount, dir / "data");
  const auto before = read_file(dir / "data/f0");
  faults.set_rules("any /* errno=ENOTCONN\n");
  std::this_thread::sleep_for(milliseconds(400));
  drop_caches();
  // During the outage: the version last checked (stale-if-error, counted).
  CHECK(read_file(mount / "f0") == before);
  CHECK(stat_of(mount, "source_health.outage_answers") >= 1);
  write_files(dir / "data", 1, kSize + 4096, 2);  // f0 changes underneath
  faults.set_rules("");
  wait_source_up(mount);
  std::this_thread::sleep_for(milliseconds(400));
  drop_caches();
  check_same(mount / "f0", dir / "data/f0");
  CHECK(read_file(mount / "f0") != before);
}

TEST_CASE("with --outage fail the cached files fail like the others while the source is down",
          "[mount][outage]") {
  TempDir dir;
  write_files(dir / "data", kFiles, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt",
              {"--attr-timeout", "0.2", "--outage", "fail", "--outage-wait", "1"});
  cache_first_files(mount, dir / "data");
  faults.set_rules("any /* errno=ENOTCONN\n");
  std::this_thread::sleep_for(milliseconds(400));
  drop_caches();
  CHECK_FALSE(read_file(mount / "f0").has_value());
  CHECK(errno == EIO);
  CHECK(stat_of(mount, "source_health.outage_answers") == 0);
  faults.set_rules("");
  wait_source_up(mount);
  check_files(mount.path(), dir / "data", kCached);
}

}  // namespace epochfs::test
