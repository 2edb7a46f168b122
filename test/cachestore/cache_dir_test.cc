#include "cachestore/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <xxhash.h>

#include "cachestore/hex.h"
#include "cachestore/log.h"
#include "cachestore/proc_stat.h"
#include "test/support/scratch_dir.h"

namespace epochfs::cachestore {
namespace {

namespace fs = std::filesystem;

constexpr char kSource[] = "/data/train";
constexpr char kOtherSource[] = "/data/val";

// A scratch directory under /tmp; `root` (the cache root) does not exist yet.
struct Scratch {
  test::ScratchDir dir{"cachedir"};
  fs::path base = dir.path();
  fs::path root = base / "cache";
};

std::unique_ptr<CacheDir> create_ok(const fs::path& root, const std::string& source) {
  auto dir = CacheDir::create(root, source);
  INFO(dir.status().to_string());
  REQUIRE(dir.is_ok());
  return std::move(dir).value();
}

// The mount directory's name up to and including the '.': "<16 hex>.".
std::string prefix_of(const CacheDir& dir) {
  const std::string name = fs::path(dir.path()).filename();
  const size_t dot = name.find('.');
  REQUIRE(dot != std::string::npos);
  return name.substr(0, dot + 1);
}

std::string prefix_for(const fs::path& root, const std::string& source) {
  auto dir = create_ok(root, source);
  return prefix_of(*dir);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A directory that looks like a mount's: a `lock` file nobody holds and one cached copy.
void make_leftover(const fs::path& dir, bool with_lock) {
  fs::create_directories(dir / "ab");
  std::ofstream(dir / "ab" / "abcd0000000000000000000000000000") << "old copy";
  if (with_lock) {
    std::ofstream(dir / "lock").flush();
  }
}

// A leftover with an index: a cache an earlier mount kept with --keep-cache.
void make_kept(const fs::path& dir) {
  make_leftover(dir, true);
  std::ofstream(dir / CacheDir::kIndexName) << "epochfs-cache-index 1\n";
}

// The process's start time, in clock ticks after boot.
std::string start_time_of(pid_t pid) {
  return std::to_string(ProcStat::of(pid)->number(ProcStat::kStartTime).value());
}

// This process's id in directory names: "<pid>-<start time>".
std::string self_id() { return std::to_string(::getpid()) + "-" + start_time_of(::getpid()); }

// The names in root that begin with prefix.
std::set<std::string> names_with(const fs::path& root, const std::string& prefix) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) {
      names.insert(e.path().filename());
    }
  }
  return names;
}

// The threads of this process.
size_t thread_count() {
  return static_cast<size_t>(
      std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator()));
}

// The digits by printf, as the names were first written: the oracle for put_hex64.
std::string printf_hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A CacheDir held by a child process: a live mount of `source` with another pid. The child
// exits (removing its directory) when the parent closes its end of the pipe.
class LiveMountInChild {
 public:
  LiveMountInChild(const fs::path& root, const std::string& source) {
    int ready[2];
    int release[2];
    if (pipe(ready) != 0 || pipe(release) != 0) {
      throw std::runtime_error("pipe failed");
    }
    pid_ = fork();
    if (pid_ < 0) {
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      int code = 1;
      {
        auto dir = CacheDir::create(root, source);
        if (dir.is_ok()) {
          const std::string path = dir.value()->path();
          if (::write(ready[1], path.data(), path.size()) == static_cast<ssize_t>(path.size())) {
            ::close(ready[1]);
            char c;
            while (::read(release[0], &c, 1) > 0) {
            }
            code = 0;
          }
        }
      }
      _exit(code);
    }
    ::close(ready[1]);
    ::close(release[0]);
    release_fd_ = release[1];
    char buf[4096];
    ssize_t n;
    while ((n = ::read(ready[0], buf, sizeof(buf))) > 0) {
      path_.append(buf, static_cast<size_t>(n));
    }
    ::close(ready[0]);
  }

  // Lets the child destroy its CacheDir and exit; returns its exit status.
  int finish() {
    if (pid_ <= 0) {
      return -1;
    }
    ::close(release_fd_);
    release_fd_ = -1;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  ~LiveMountInChild() { finish(); }

  LiveMountInChild(const LiveMountInChild&) = delete;
  LiveMountInChild& operator=(const LiveMountInChild&) = delete;

  // The child's mount directory; empty if it could not create one.
  const std::string& path() const { return path_; }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  std::string path_;
};

// A child process that, once started, creates and destroys a CacheDir of `source`
// `iterations` times and reports how many create() calls failed and how many returned a
// directory that was already gone (removed by someone else).
class CreateLoopInChild {
 public:
  // The child starts when every write end of the start pipe is closed; it closes
  // start_write_fd, the parent's, itself.
  CreateLoopInChild(const fs::path& root, const std::string& source, int iterations, int start_fd,
                    int start_write_fd) {
    int result[2];
    if (pipe(result) != 0) {
      throw std::runtime_error("pipe failed");
    }
    pid_ = fork();
    if (pid_ < 0) {
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      ::close(result[0]);
      ::close(start_write_fd);
      ::alarm(60);  // never outlive a hung test
      set_log_level(LogLevel::kError);
      char c;
      while (::read(start_fd, &c, 1) > 0) {
      }
      int counts[2] = {0, 0};  // failed, vanished
      for (int i = 0; i < iterations; ++i) {
        auto dir = CacheDir::create(root, source);
        if (!dir.is_ok()) {
          ++counts[0];
          continue;
        }
        // The directory must still be ours, by name, with its lock file.
        struct stat by_fd;
        struct stat by_path;
        const std::string path = dir.value()->path();
        if (::fstat(dir.value()->fd(), &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0 ||
            by_fd.st_ino != by_path.st_ino || ::access((path + "/lock").c_str(), F_OK) != 0) {
          ++counts[1];
        }
      }
      const bool sent = ::write(result[1], counts, sizeof(counts)) == sizeof(counts);
      _exit(sent ? 0 : 1);
    }
    ::close(result[1]);
    result_fd_ = result[0];
  }

  // Waits for the child; {failed creates, vanished directories}, or {-1, -1}.
  std::pair<int, int> finish() {
    int counts[2] = {-1, -1};
    if (result_fd_ >= 0 && ::read(result_fd_, counts, sizeof(counts)) != sizeof(counts)) {
      counts[0] = counts[1] = -1;
    }
    if (result_fd_ >= 0) {
      ::close(result_fd_);
      result_fd_ = -1;
    }
    if (pid_ > 0) {
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    return {counts[0], counts[1]};
  }

  ~CreateLoopInChild() { finish(); }

  CreateLoopInChild(const CreateLoopInChild&) = delete;
  CreateLoopInChild& operator=(const CreateLoopInChild&) = delete;

 private:
  pid_t pid_ = -1;
  int result_fd_ = -1;
};

}  // namespace

TEST_CASE("CacheDir creates a private root and a per-mount directory", "[cache_dir]") {
  Scratch t;
  const fs::path root = t.base / "missing" / "parents" / "cache";
  {
    auto dir = create_ok(root, kSource);
    struct stat st;
    REQUIRE(::stat(root.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);

    const fs::path mine = dir->path();
    CHECK(mine.parent_path() == root);
    CHECK(fs::is_directory(mine));
    CHECK(fs::is_regular_file(mine / "lock"));
    // "<16 hex digits of the source hash>.<pid>-<start time>": never the name of a later
    // process that gets the same pid.
    const std::string name = mine.filename();
    CHECK(std::regex_match(name, std::regex("[0-9a-f]{16}\\.[0-9]+-[0-9]+")));
    CHECK(name.substr(17) == self_id());
    CHECK(dir->leftovers_removed() == 0);
    // The directory fd refers to the mount directory.
    struct stat by_fd;
    struct stat by_path;
    REQUIRE(::fstat(dir->fd(), &by_fd) == 0);
    REQUIRE(::stat(mine.c_str(), &by_path) == 0);
    CHECK(by_fd.st_ino == by_path.st_ino);
    CHECK(by_fd.st_dev == by_path.st_dev);
    auto fs_info = dir->statfs();
    REQUIRE(fs_info.is_ok());
    CHECK(fs_info.value().f_bsize > 0);
  }
  // Destruction removed the mount directory, not the root.
  CHECK(fs::is_directory(root));
  CHECK(fs::is_empty(root));
}

TEST_CASE("CacheDir leaves an existing root's mode alone", "[cache_dir]") {
  Scratch t;
  fs::create_directories(t.root);
  REQUIRE(::chmod(t.root.c_str(), 0755) == 0);
  auto dir = create_ok(t.root, kSource);
  struct stat st;
  REQUIRE(::stat(t.root.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);
}

TEST_CASE("CacheDir removes only its own directory", "[cache_dir]") {
  Scratch t;
  fs::create_directories(t.root / "other" / "inner");
  std::ofstream(t.root / "notes.txt") << "keep me";
  std::ofstream(t.root / "other" / "inner" / "data") << "keep me too";
  std::string mine;
  {
    auto dir = create_ok(t.root, kSource);
    mine = dir->path();
    // Fill it the way the store does: fan-out directories and a copy.
    const std::string name = CacheDir::object_name("a/b.jpg");
    REQUIRE(dir->make_parents(name).is_ok());
    REQUIRE(dir->make_parents(name).is_ok());  // idempotent
    CHECK(fs::is_directory((fs::path(mine) / name).parent_path()));
    std::ofstream(fs::path(mine) / name) << "copy";
    CHECK(dir->leftovers_removed() == 0);
  }
  CHECK_FALSE(fs::exists(mine));
  CHECK(read_file(t.root / "notes.txt") == "keep me");
  CHECK(read_file(t.root / "other" / "inner" / "data") == "keep me too");
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(t.root)) {
    left.insert(e.path().filename());
  }
  CHECK(left == std::set<std::string>{"notes.txt", "other"});
}

TEST_CASE("CacheDir removes the leftovers of dead mounts of every source", "[cache_dir]") {
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  const std::string other_prefix = prefix_for(t.root, kOtherSource);
  REQUIRE(prefix != other_prefix);

  // A live mount of the same source in another process holds its lock. (Started first: its
  // own create() would remove the leftovers below.)
  LiveMountInChild live(t.root, kSource);
  REQUIRE_FALSE(live.path().empty());
  const fs::path live_dir = live.path();
  REQUIRE(live_dir.filename().string().rfind(prefix, 0) == 0);
  std::ofstream(live_dir / "ab_copy") << "live";
  const fs::path dead = t.root / (prefix + "999999-1");
  const fs::path other_dead = t.root / (other_prefix + "999999-1");
  make_leftover(dead, true);
  make_leftover(other_dead, true);

  {
    const size_t threads = thread_count();
    auto dir = create_ok(t.root, kSource);
    // create() runs before the daemon forks: it must not start a thread.
    CHECK(thread_count() == threads);
    CHECK(dir->leftovers_removed() == 1);
    CHECK_FALSE(fs::exists(dead));
    // The other source's is out of the way at once, and removed in the background.
    CHECK(dir->other_leftovers() == 1);
    CHECK_FALSE(fs::exists(other_dead));
    CHECK(names_with(t.root, ".trash.") ==
          std::set<std::string>{".trash." + other_dead.filename().string()});
    CHECK(dir->wait_background_removal() == 1);
    CHECK(names_with(t.root, ".trash.").empty());
    CHECK(fs::is_directory(live_dir));
    CHECK(read_file(live_dir / "ab_copy") == "live");
    CHECK(fs::is_regular_file(live_dir / "lock"));
  }
  // The child's mount ends normally and cleans up after itself.
  CHECK(live.finish() == 0);
  CHECK_FALSE(fs::exists(live_dir));
  CHECK(fs::is_empty(t.root));
}

TEST_CASE("CacheDir leaves a live mount of another source alone", "[cache_dir]") {
  Scratch t;
  LiveMountInChild live(t.root, kOtherSource);
  REQUIRE_FALSE(live.path().empty());
  const fs::path live_dir = live.path();
  std::ofstream(live_dir / "ab_copy") << "live";
  {
    auto dir = create_ok(t.root, kSource);
    CHECK(dir->other_leftovers() == 0);
    CHECK(dir->wait_background_removal() == 0);
    CHECK(read_file(live_dir / "ab_copy") == "live");
    CHECK(fs::is_regular_file(live_dir / "lock"));
  }
  CHECK(read_file(live_dir / "ab_copy") == "live");
  CHECK(live.finish() == 0);
}

TEST_CASE("CacheDir leaves a kept cache of another source for that source", "[cache_dir]") {
  Scratch t;
  const std::string other_prefix = prefix_for(t.root, kOtherSource);
  const fs::path kept = t.root / (other_prefix + "999999-1");
  make_kept(kept);
  {
    auto dir = create_ok(t.root, kSource);
    CHECK(dir->other_leftovers() == 0);
    CHECK(dir->wait_background_removal() == 0);
    CHECK(fs::is_regular_file(kept / CacheDir::kIndexName));
  }
  // Its own source's next mount with --keep-cache takes it over.
  auto adopted = CacheDir::create(t.root, kOtherSource, true);
  REQUIRE(adopted.is_ok());
  CHECK(adopted.value()->adopted());
  CHECK(read_file(fs::path(adopted.value()->path()) / "ab" / "abcd0000000000000000000000000000") ==
        "old copy");
}

TEST_CASE("CacheDir removes the trash a removal cut short left", "[cache_dir]") {
  Scratch t;
  const std::string other_prefix = prefix_for(t.root, kOtherSource);
  // A mount that died while it removed a leftover: its lock is free, or already deleted.
  const fs::path with_lock = t.root / (".trash." + other_prefix + "999999-1");
  const fs::path without_lock = t.root / (".trash." + other_prefix + "999999-2");
  make_leftover(with_lock, true);
  make_leftover(without_lock, false);
  // One whose remover is alive (its lock held here) stays.
  const fs::path held = t.root / (".trash." + other_prefix + "999999-3");
  make_leftover(held, true);
  UniqueFd lock(::open((held / "lock").c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(lock.valid());
  REQUIRE(::flock(lock.get(), LOCK_EX | LOCK_NB) == 0);
  auto dir = create_ok(t.root, kSource);
  CHECK(dir->other_leftovers() == 0);
  CHECK(dir->wait_background_removal() == 2);
  CHECK(names_with(t.root, ".trash.") == std::set<std::string>{held.filename()});
}

TEST_CASE("CacheDir's background removal, once started, is only joined by a wait", "[cache_dir]") {
  Scratch t;
  const std::string other_prefix = prefix_for(t.root, kOtherSource);
  const fs::path other_dead = t.root / (other_prefix + "999999-1");
  make_leftover(other_dead, true);
  auto dir = create_ok(t.root, kSource);
  dir->start_background_removal();  // as the engine does once the daemon runs
  dir->start_background_removal();  // a second start changes nothing
  CHECK(dir->wait_background_removal() == 1);
  CHECK(names_with(t.root, ".trash.").empty());
}

TEST_CASE("CacheDir treats a leftover without a lock file as dead", "[cache_dir]") {
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  const fs::path dead = t.root / (prefix + "999999");
  make_leftover(dead, false);
  auto dir = create_ok(t.root, kSource);
  CHECK(dir->leftovers_removed() == 1);
  CHECK_FALSE(fs::exists(dead));
}

TEST_CASE("CacheDir removes what a mount that died while building its directory left",
          "[cache_dir]") {
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  const std::string other_prefix = prefix_for(t.root, kOtherSource);
  // The pid of a process that has exited: nobody can be building under that name.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    _exit(0);
  }
  REQUIRE(waitpid(pid, nullptr, 0) == pid);
  const std::string gone = std::to_string(pid);
  // A builder locks `lock` before it has that name: a free `lock` is a dead builder's.
  const fs::path with_lock = t.root / (".new." + prefix + gone + "-1");
  // Without one, the builder's pid and start time decide.
  const fs::path without_lock = t.root / (".new." + prefix + gone + "-2");
  const fs::path other = t.root / (".new." + other_prefix + gone + "-1");
  make_leftover(with_lock, true);
  make_leftover(without_lock, false);
  make_leftover(other, true);
  // This process's pid with another start time: an earlier process that had this pid. A
  // check by pid alone would take it for a live builder.
  const fs::path reused_pid = t.root / (".new." + prefix + std::to_string(::getpid()) + "-" +
                                        start_time_of(::getpid()) + "1");
  make_leftover(reused_pid, false);
  // A live process (the one that started the tests), building: alive.
  const pid_t parent = ::getppid();
  const fs::path building =
      t.root / (".new." + prefix + std::to_string(parent) + "-" + start_time_of(parent));
  make_leftover(building, false);
  auto dir = create_ok(t.root, kSource);
  CHECK(dir->leftovers_removed() == 3);
  CHECK(dir->other_leftovers() == 1);
  CHECK_FALSE(fs::exists(with_lock));
  CHECK_FALSE(fs::exists(without_lock));
  CHECK_FALSE(fs::exists(reused_pid));
  CHECK_FALSE(fs::exists(other));
  CHECK(fs::is_directory(building));
  CHECK(names_with(t.root, ".new.") == std::set<std::string>{building.filename()});
}

TEST_CASE("CacheDir keeps a leftover whose lock is held in this process", "[cache_dir]") {
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  // flock belongs to the open file description: a lock held here through another open of
  // the lock file looks alive to create().
  const fs::path held = t.root / (prefix + "888888");
  make_leftover(held, true);
  UniqueFd lock(::open((held / "lock").c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(lock.valid());
  REQUIRE(::flock(lock.get(), LOCK_EX | LOCK_NB) == 0);
  {
    auto dir = create_ok(t.root, kSource);
    CHECK(dir->leftovers_removed() == 0);
    CHECK(fs::is_directory(held));
  }
  // Once released it is a dead mount's directory.
  lock.reset();
  auto dir = create_ok(t.root, kSource);
  CHECK(dir->leftovers_removed() == 1);
  CHECK_FALSE(fs::exists(held));
}

TEST_CASE("A second CacheDir of the same source in one process never takes the first's",
          "[cache_dir]") {
  Scratch t;
  auto first = create_ok(t.root, kSource);
  const fs::path first_path = first->path();
  std::ofstream(first_path / "copy") << "first";
  {
    auto second = CacheDir::create(t.root, kSource);
    if (second.is_ok()) {
      // If it is allowed at all, it must be a directory of its own.
      CHECK(second.value()->path() != first->path());
      CHECK(second.value()->leftovers_removed() == 0);
    } else {
      // The directory name is "<source>.<pid>": taken, and its lock is held.
      CHECK(second.error_code() != 0);
    }
  }
  CHECK(fs::is_directory(first_path));
  CHECK(read_file(first_path / "copy") == "first");
  CHECK(fs::is_regular_file(first_path / "lock"));
  // The first still owns a working directory.
  CHECK(first->make_parents("12/1234").is_ok());
  CHECK(fs::is_directory(first_path / "12"));
}

// A create() that fails must not leave its half-built directory in the root.
TEST_CASE("A failed CacheDir::create leaves nothing behind", "[cache_dir]") {
  Scratch t;
  auto first = create_ok(t.root, kSource);
  // Same source and pid: the mount directory's name is taken by a live mount.
  auto second = CacheDir::create(t.root, kSource);
  REQUIRE_FALSE(second.is_ok());
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(t.root)) {
    names.insert(e.path().filename());
  }
  CHECK(names == std::set<std::string>{fs::path(first->path()).filename()});
}

// Two mounts of the same source starting at the same time: each create() must either see
// the other's directory as alive or not see it at all, never remove it or take its lock.
TEST_CASE("Concurrent creates of the same source never remove each other's directory",
          "[cache_dir]") {
  Scratch t;
  fs::create_directories(t.root);
  int start[2];
  REQUIRE(pipe(start) == 0);
  UniqueFd start_read(start[0]);
  UniqueFd start_write(start[1]);
  CreateLoopInChild a(t.root, kSource, 500, start_read.get(), start_write.get());
  CreateLoopInChild b(t.root, kSource, 500, start_read.get(), start_write.get());
  start_write.reset();  // go
  const auto ra = a.finish();
  const auto rb = b.finish();
  REQUIRE(ra.first >= 0);
  REQUIRE(rb.first >= 0);
  CHECK(ra.first + rb.first == 0);    // create() failed: its lock was held by the other
  CHECK(ra.second + rb.second == 0);  // create() succeeded but its directory was removed
  CHECK(fs::is_empty(t.root));
}

TEST_CASE("hex64 writes 16 lower-case digits, as printf does", "[cache_dir]") {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> values = {0, 1, 0xf, 0x0123456789abcdefULL, UINT64_MAX};
  for (int i = 0; i < 1000; ++i) {
    values.push_back(rng() >> (rng() % 64));
  }
  int wrong = 0;
  for (const uint64_t v : values) {
    wrong += hex64(v) == printf_hex64(v) ? 0 : 1;
  }
  CHECK(wrong == 0);
}

// cache_dir.h: "ab/<32 hex>", one level of 256 fan-out directories.
TEST_CASE("CacheDir::object_name is a stable one-level fan-out of XXH128", "[cache_dir]") {
  const std::string a = CacheDir::object_name("a/b.jpg");
  CHECK(a == CacheDir::object_name("a/b.jpg"));
  REQUIRE(std::regex_match(a, std::regex("[0-9a-f]{2}/[0-9a-f]{32}")));
  const std::string hex = a.substr(3);
  CHECK(a.substr(0, 2) == hex.substr(0, 2));
  // The same on every mount and build: XXH3-128 of the path, high half first.
  const XXH128_hash_t h = XXH3_128bits("a/b.jpg", 7);
  CHECK(hex == printf_hex64(h.high64) + printf_hex64(h.low64));

  // Different paths, even close ones, get different names, each well formed.
  std::set<std::string> names;
  std::set<std::string> fanout;
  const std::regex form("([0-9a-f]{2})/([0-9a-f]{32})");
  int malformed = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string n = CacheDir::object_name("train/class" + std::to_string(i % 10) + "/img_" +
                                                std::to_string(i) + ".jpg");
    std::smatch m;
    if (!std::regex_match(n, m, form) || m[2].str().substr(0, 2) != m[1].str()) {
      ++malformed;
    }
    names.insert(n);
    fanout.insert(m[1].str());
  }
  CHECK(malformed == 0);
  CHECK(names.size() == 1000);
  CHECK(fanout.size() > 200);  // 1000 names spread over most of the 256 directories
  CHECK(CacheDir::object_name("a/b.jpg") != CacheDir::object_name("a/b.jpeg"));
  CHECK(CacheDir::object_name("a/b.jpg") != CacheDir::object_name("b/a.jpg"));
  CHECK(CacheDir::object_name("a/b.jpg") != CacheDir::object_name("a/b.jpg/"));
  CHECK(CacheDir::object_name("") != CacheDir::object_name("a"));
}

}  // namespace epochfs::cachestore

// Issue 34: a root daemon must not use a cache root, or adopt a kept directory, that another
// user can change. Tests run as root; uid 65534 (nobody) stands for that other user.
namespace epochfs::cachestore {
namespace {

constexpr uid_t kOtherUid = 65534;

void give_to_other_user(const fs::path& p) {
  REQUIRE(::lchown(p.c_str(), kOtherUid, kOtherUid) == 0);
}

void give_tree_to_other_user(const fs::path& p) {
  give_to_other_user(p);
  for (const auto& e : fs::recursive_directory_iterator(p)) {
    give_to_other_user(e.path());
  }
}

}  // namespace

TEST_CASE("CacheDir refuses a root another user owns", "[cache_dir][trust]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: making a directory another user's needs root");
    return;
  }
  Scratch t;
  fs::create_directories(t.root);
  REQUIRE(::chmod(t.root.c_str(), 0700) == 0);
  give_to_other_user(t.root);
  auto dir = CacheDir::create(t.root, kSource);
  REQUIRE_FALSE(dir.is_ok());
  INFO(dir.status().to_string());
  CHECK(dir.status().context().find("owned by uid 65534") != std::string::npos);
  CHECK(dir.status().context().find("chown 0 " + t.root.string()) != std::string::npos);
  CHECK(fs::is_empty(t.root));  // nothing made in it
}

TEST_CASE("CacheDir refuses a root other users can write", "[cache_dir][trust]") {
  Scratch t;
  fs::create_directories(t.root);
  for (mode_t mode : {0777, 0770, 0707, 01777}) {
    INFO("mode " << std::oct << mode);
    REQUIRE(::chmod(t.root.c_str(), mode) == 0);
    auto dir = CacheDir::create(t.root, kSource);
    REQUIRE_FALSE(dir.is_ok());
    CHECK(dir.status().context().find("writable by") != std::string::npos);
    CHECK(fs::is_empty(t.root));
  }
}

TEST_CASE("CacheDir refuses a root below a directory another user can change",
          "[cache_dir][trust]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: making a directory another user's needs root");
    return;
  }
  Scratch t;
  const fs::path above = t.base / "scratch";
  const fs::path root = above / "cache";
  fs::create_directories(root);
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
  SECTION("owned by another user, even with the sticky bit") {
    REQUIRE(::chmod(above.c_str(), 01777) == 0);
    give_to_other_user(above);
    auto dir = CacheDir::create(root, kSource);
    REQUIRE_FALSE(dir.is_ok());
    CHECK(dir.status().context().find(above.string() + ", above the cache root") !=
          std::string::npos);
  }
  SECTION("world-writable without the sticky bit") {
    REQUIRE(::chmod(above.c_str(), 0777) == 0);
    auto dir = CacheDir::create(root, kSource);
    REQUIRE_FALSE(dir.is_ok());
    CHECK(dir.status().context().find("writable by") != std::string::npos);
  }
  SECTION("reached through a symlink another user owns") {
    const fs::path link = t.base / "link";
    fs::create_directory_symlink(above, link);
    give_to_other_user(link);
    auto dir = CacheDir::create(link / "cache", kSource);
    REQUIRE_FALSE(dir.is_ok());
    CHECK(dir.status().context().find("symlink") != std::string::npos);
  }
  CHECK(fs::is_empty(root));
}

TEST_CASE("CacheDir accepts a private root below a root-owned sticky directory",
          "[cache_dir][trust]") {
  Scratch t;
  // Like a cache dir on a scratch disk mounted with mode 1777, as /tmp is.
  const fs::path scratch = t.base / "scratch";
  fs::create_directories(scratch);
  REQUIRE(::chmod(scratch.c_str(), 01777) == 0);
  REQUIRE(::chown(scratch.c_str(), 0, 0) == 0);
  SECTION("made by create") {
    auto dir = create_ok(scratch / "epochfs" / "cache", kSource);
    CHECK(dir->path().rfind((scratch / "epochfs" / "cache").string(), 0) == 0);
  }
  SECTION("existing, through a root-owned symlink") {
    fs::create_directories(scratch / "cache");
    REQUIRE(::chmod((scratch / "cache").c_str(), 0755) == 0);
    fs::create_directory_symlink(scratch, t.base / "link");
    auto dir = create_ok(t.base / "link" / "cache", kSource);
  }
}

TEST_CASE("CacheDir does not adopt a kept directory another user could have written",
          "[cache_dir][trust]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: making a directory another user's needs root");
    return;
  }
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  const fs::path kept = t.root / (prefix + "999999-1");
  make_kept(kept);
  REQUIRE(::chmod(kept.c_str(), 0700) == 0);
  REQUIRE(::chmod((kept / "ab").c_str(), 0700) == 0);
  SECTION("the directory is another user's") { give_tree_to_other_user(kept); }
  SECTION("only its index is another user's") { give_to_other_user(kept / CacheDir::kIndexName); }
  SECTION("its fan-out directory is writable by all") {
    REQUIRE(::chmod((kept / "ab").c_str(), 0777) == 0);
  }
  SECTION("the directory is writable by its group") { REQUIRE(::chmod(kept.c_str(), 0770) == 0); }
  auto dir = CacheDir::create(t.root, kSource, true);
  REQUIRE(dir.is_ok());
  CHECK_FALSE(dir.value()->adopted());
  // Left in place, neither adopted nor removed.
  CHECK(read_file(kept / "ab" / "abcd0000000000000000000000000000") == "old copy");
  CHECK(fs::is_regular_file(kept / CacheDir::kIndexName));
}

TEST_CASE("CacheDir still adopts a kept directory that is its own", "[cache_dir][trust]") {
  Scratch t;
  const std::string prefix = prefix_for(t.root, kSource);
  const fs::path kept = t.root / (prefix + "999999-1");
  make_kept(kept);
  auto dir = CacheDir::create(t.root, kSource, true);
  REQUIRE(dir.is_ok());
  CHECK(dir.value()->adopted());
}

}  // namespace epochfs::cachestore
