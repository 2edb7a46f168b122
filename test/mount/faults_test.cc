// Faults of the shared storage and of the cache disk (docs/reliability.md, rows F and C), injected
// by epochfs-faultfs: under each, every byte a reader gets is the source's, errors reach only the
// files they belong to, and the mount stays live.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "tools/lab/dataset.h"
#include "tools/lab/process.h"
#include "tools/lab/read_bench.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSize = 100'000;

// Reads the whole file; the errno of the first failure, or 0.
int read_errno(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return errno;
  }
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      return errno;
    }
    if (n == 0) {
      return 0;
    }
  }
}

// Threads of this test process in uninterruptible sleep (stuck in a filesystem request).
int threads_in_d_state() {
  int stuck = 0;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    stuck += paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'D';
  }
  return stuck;
}

uint64_t counter(const std::string& json, const std::string& path, const std::string& name) {
  const std::string key = "\"" + path + "\": {";
  const size_t at = json.find(key);
  if (at == std::string::npos) {
    return 0;
  }
  const size_t field = json.find("\"" + name + "\": ", at);
  return std::stoull(json.substr(field + name.size() + 4));
}

// Waits until faultfs has injected n faults: the requests they hold have reached it.
void wait_injected(const FaultFs& faults, uint64_t n) {
  for (int i = 0; i < 1000 && faults.injected() < n; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  INFO(faults.stats());
  REQUIRE(faults.injected() >= n);
}

// A child process that reads f<from> .. f<to - 1> through mnt and compares each with src's:
// exits 0 if all were right, 1 at the first that was not. A child, so that a reader stuck on a
// hung disk cannot hold up the test.
pid_t fork_checked_reader(const std::string& mnt, const std::string& src, int from, int to) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (int i = from; i < to; ++i) {
      const std::string name = "/f" + std::to_string(i);
      const auto a = tools::file_digest(mnt + name);
      const auto b = tools::file_digest(src + name);
      if (!a.is_ok() || !b.is_ok() || a.value() != b.value()) {
        _exit(1);
      }
    }
    _exit(0);
  }
  return pid;
}

}  // namespace

TEST_CASE("faultfs fixture: rules fire, count down and are replaced", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 3, 1000);
  FaultFs faults(dir / "data", dir / "faulty");
  CHECK(read_errno(dir / "faulty/f0") == 0);
  faults.set_rules("open /f0 errno=EIO count=2\nread /f1 errno=ESTALE\n");
  CHECK(read_errno(dir / "faulty/f0") == EIO);
  CHECK(read_errno(dir / "faulty/f0") == EIO);
  CHECK(read_errno(dir / "faulty/f0") == 0);
  CHECK(read_errno(dir / "faulty/f1") == ESTALE);
  CHECK(read_errno(dir / "faulty/f2") == 0);
  CHECK(counter(faults.stats(), "/f0", "opens") == 2);
  INFO(faults.stats());
  CHECK(contains(faults.stats(), "\"injected\": 3"));
  CHECK_FALSE(faults.try_set_rules("open /f0 frobnicate\n"));
  faults.set_rules("");
  CHECK(read_errno(dir / "faulty/f1") == 0);
}

TEST_CASE("a source error reaches only its file, with its own errno", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 8, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  faults.set_rules(
      "open /f1 errno=EIO\n"
      "open /f2 errno=EACCES\n"
      "read /f3 errno=EIO\n"
      "open /f4 errno=ETIMEDOUT\n"
      "open /f5 errno=ENOTCONN\n");
  // A transport-level error (ETIMEDOUT, ENOTCONN) says the storage is in trouble: the reader
  // waits --outage-wait for it (test/mount/outage_test.cc), then gets EIO.
  Mount mount(faults.path(), dir / "mnt", {"--outage-wait", "1"});
  CHECK(read_errno(mount / "f1") == EIO);
  CHECK(read_errno(mount / "f2") == EACCES);
  CHECK(read_errno(mount / "f3") == EIO);
  CHECK(read_errno(mount / "f4") == EIO);
  CHECK(read_errno(mount / "f5") == EIO);
  for (const char* ok : {"f0", "f6", "f7"}) {
    check_same(mount / ok, dir / "data/" + std::string(ok));
  }
  // Nothing half-read was kept: once the source is well, every file reads whole and right.
  wait_for_staging(mount);
  faults.set_rules("");
  check_files(mount.path(), dir / "data", 8);
}

// A file of kBlocks blocks at dir/data/data.bin, its bytes; and a range order naming a sample
// in each of its blocks, in file order.
constexpr uint64_t kBlock = uint64_t{1} << 20;
constexpr int kBlocks = 6;

std::string make_blocks_file(const TempDir& dir) {
  fs::create_directories(dir / "data");
  std::string bytes(kBlocks * kBlock, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(i * 7 + i / 4093);
  }
  std::ofstream(dir / "data/data.bin", std::ios::binary) << bytes;
  return bytes;
}

std::string blocks_order() {
  std::string order = "#form ranges\n";
  for (int b = 0; b < kBlocks; ++b) {
    order += std::to_string(b * kBlock + 10) + " 100 data.bin\n";
  }
  return order;
}

// A file of kBlocks blocks on faultfs with rules set, its blocks' order published through a
// mount and staged, one copy at a time.
struct BlocksStaged {
  explicit BlocksStaged(const std::string& rules) {
    faults.set_rules(rules);
    REQUIRE(publish(mount, blocks_order()) == 0);
    wait_for_staging(mount);
  }

  TempDir dir;
  const std::string bytes = make_blocks_file(dir);
  FaultFs faults{dir / "data", dir / "faulty"};
  Mount mount{faults.path(), dir / "mnt", {"--stage-threads", "1", "--lookahead", "64"}};
};

TEST_CASE("a failed read of a block's source drops the file's shared open",
          "[mount][faults][ranges]") {
  // Copies of one file's blocks share one open of it (Engine::block_sources_). After a read
  // through it fails, the next block's copy opens the file again: the open may be what broke.
  // Every read fails while the rule holds: a copy asks for its block ahead of its reads, and a
  // read ahead that fails is only tried again by the copy's own read.
  BlocksStaged staged("read /data.bin errno=EIO\n");
  CHECK(staged.faults.injected() >= kBlocks);
  CHECK(stat_of(staged.mount, "cache.files_cached") == 0);
  // One copy at a time, each after a failure: each opened the file again (one open, or two
  // past the shared open's one-second life, without the drop).
  const double opens = counter(staged.faults.stats(), "/data.bin", "opens");
  CHECK(opens >= kBlocks);
  CHECK(opens <= kBlocks + 2);
  staged.faults.set_rules("");
  CHECK(read_file(staged.mount / "data.bin") == staged.bytes);
}

TEST_CASE("a single failed read ahead of a block's copy costs the copy nothing",
          "[mount][faults][ranges]") {
  // The first read of the file to reach the source is one the copy of block 0 asked for ahead
  // (cachestore::copy_into); the copy's own read of those bytes then reads them again.
  BlocksStaged staged("read /data.bin errno=EIO count=1\n");
  CHECK(staged.faults.injected() == 1);
  CHECK(stat_of(staged.mount, "cache.copies_aborted") == 0);
  CHECK(stat_of(staged.mount, "cache.files_cached") == kBlocks);
  CHECK(read_file(staged.mount / "data.bin") == staged.bytes);
}

TEST_CASE("a copy that failed is made again at a later open", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 4, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt");
  // The reader's own read works; the copy's second read of the file fails.
  faults.set_rules("read /f0 errno=EIO count=1\n");
  const int first = read_errno(mount / "f0");
  CHECK((first == 0 || first == EIO));
  wait_for_staging(mount);
  check_same(mount / "f0", dir / "data/f0");
  wait_for_staging(mount);
  // Now a copy exists and serves it: the source is not read again.
  const uint64_t opens = counter(faults.stats(), "/f0", "opens");
  check_same(mount / "f0", dir / "data/f0");
  CHECK(counter(faults.stats(), "/f0", "opens") == opens);
}

TEST_CASE("short reads from the source still give whole files", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 4, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  faults.set_rules("read /* short=1000\n");
  Mount mount(faults.path(), dir / "mnt");
  check_files(mount.path(), dir / "data", 4);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == 4);
  check_files(mount.path(), dir / "data", 4);
}

TEST_CASE("many readers of one file being fetched share one source read", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 20, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  // Slow opens keep each file in flight while the readers pile up.
  faults.set_rules("open /* delay=300\n");
  Mount mount(faults.path(), dir / "mnt");
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int r = 0; r < 16; ++r) {
    readers.emplace_back([&, r] {
      for (int k = 0; k < 20; ++k) {
        const int i = (k + r) % 20;
        const auto got = tools::file_digest(mount / ("f" + std::to_string(i)));
        const auto want = tools::file_digest(dir / ("data/f" + std::to_string(i)));
        if (!got.is_ok() || got.value() != want.value()) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : readers) {
    t.join();
  }
  CHECK(bad == 0);
  wait_for_staging(mount);
  const std::string stats = faults.stats();
  INFO(stats);
  for (int i = 0; i < 20; ++i) {
    const std::string p = "/f" + std::to_string(i);
    // 16 readers, each file read from the source by the first reader and its copy at most.
    CHECK(counter(stats, p, "opens") <= 2);
    CHECK(counter(stats, p, "bytes") <= 2 * kSize);
  }
}

TEST_CASE("a hung source file holds up only its own readers", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 10, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt");
  // f1..f9 cached first.
  for (int i = 1; i < 10; ++i) {
    check_same(mount / ("f" + std::to_string(i)), dir / ("data/f" + std::to_string(i)));
  }
  wait_for_staging(mount);
  faults.set_rules("open /f0 hang\nread /f0 hang\n");
  auto hung = std::async(std::launch::async, [&] { return read_errno(mount / "f0"); });
  wait_injected(faults, 1);  // f0's reader is held in the source
  const std::string source_before = faults.stats();
  const double hits = stat_of(mount, "hits");
  const double waits = stat_of(mount, "waits");
  // Meanwhile the cached files and the stats answer (a read held up behind f0 would hang here
  // until the suite's timeout), from the copies: the source sees no open or read of them, and
  // no open waits.
  for (int i = 1; i < 10; ++i) {
    check_same(mount / ("f" + std::to_string(i)), dir / ("data/f" + std::to_string(i)));
  }
  CHECK(read_file(mount / ".epochfs/stats").has_value());
  CHECK(hung.wait_for(seconds(0)) == std::future_status::timeout);  // all while f0 hung
  const std::string source_after = faults.stats();
  INFO(source_before << "\n" << source_after);
  for (int i = 1; i < 10; ++i) {
    const std::string p = "/f" + std::to_string(i);
    CHECK(counter(source_after, p, "opens") == counter(source_before, p, "opens"));
    CHECK(counter(source_after, p, "reads") == counter(source_before, p, "reads"));
  }
  CHECK(stat_of(mount, "hits") - hits == 9);
  CHECK(stat_of(mount, "waits") == waits);
  // Rules first: a request arriving between a release and the end of its hang rule would hang
  // until the next release (seen once: the second READ of f0's readahead).
  faults.set_rules("");
  faults.release();
  // Liveness only: released, the reader finishes at all (10 s is generous; else it hung).
  REQUIRE(hung.wait_for(seconds(10)) == std::future_status::ready);
  CHECK(hung.get() == 0);
  check_same(mount / "f0", dir / "data/f0");
}

TEST_CASE("an unreachable source: cached files are still served, never as empty",
          "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 6, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt", {"--attr-timeout", "0.2", "--outage-wait", "1"});
  check_files(mount.path(), dir / "data", 3);
  wait_for_staging(mount);
  faults.set_rules("any /* errno=ENOTCONN\n");
  // Past the attribute timeout, the source cannot confirm the copies: they are served at the
  // version last checked (test/mount/outage_test.cc has the rest); the others fail.
  std::this_thread::sleep_for(milliseconds(400));
  for (int i = 0; i < 6; ++i) {
    const std::string name = "f" + std::to_string(i);
    const auto bytes = read_file(mount / name);
    if (i < 3) {
      REQUIRE(bytes.has_value());
      check_same(mount / name, dir / ("data/" + name));
    } else {
      CHECK_FALSE(bytes.has_value());
      CHECK(errno == EIO);
    }
  }
  // The source comes back: everything reads, without a remount.
  faults.set_rules("");
  check_files(mount.path(), dir / "data", 6);
}

TEST_CASE("a file changed while it is being copied is never served torn", "[mount][faults]") {
  // docs/reliability.md F7: the copy is made from the version seen at the open; a change of the
  // source during the copy must throw the copy away (Engine::stage's check after the copy), not
  // publish it for the version check of a later open to catch.
  const char* how = GENERATE("append", "truncate", "rewrite");
  INFO(how);
  TempDir dir;
  write_files(dir / "data", 2, kSize);
  const auto original = read_file(dir / "data/f0");
  FaultFs faults(dir / "data", dir / "faulty");
  Mount mount(faults.path(), dir / "mnt", {"--attr-timeout", "0"});
  // The first read of f0 that reaches the source changes it underneath. The copy must read
  // f0 at least once, so the change always comes before the copy ends: the copy of the open's
  // version is read across it (or after it), whichever of the reader and the copy reads first.
  faults.set_rules(std::string("read /f0 mutate=") + how + " count=1\n");
  (void)read_file(mount / "f0");
  wait_for_staging(mount);
  INFO(faults.stats());
  INFO(read_file(mount / ".epochfs/stats").value_or(""));
  REQUIRE(contains(faults.stats(), "\"injected\": 1"));
  REQUIRE(read_file(dir / "data/f0") != original);  // the source has a new version
  // The copy made while the file changed was aborted: nothing was published.
  CHECK(stat_of(mount, "cache.copies_aborted") == 1);
  CHECK(stat_of(mount, "cache.files_staged") == 0);
  CHECK(stat_of(mount, "cache.files_cached") == 0);
  faults.set_rules("");
  // Every later open gets the file as it now is in the source: the first reads it there and
  // copies the new version, the others are served that copy.
  const double hits = stat_of(mount, "hits");
  for (int k = 0; k < 3; ++k) {
    check_same(mount / "f0", dir / "data/f0");
    wait_for_staging(mount);
  }
  CHECK(stat_of(mount, "cache.files_staged") == 1);
  CHECK(stat_of(mount, "hits") - hits == 2);
  // No copy of the old version was ever there for an open to find stale and drop.
  CHECK(stat_of(mount, "cache.dropped_stale") == 0);
  CHECK(stat_of(mount, "cache.copies_aborted") == 1);
}

TEST_CASE("a failing cache disk slows reads down but never fails them", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 10, kSize);
  fs::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "data", dir / "mnt", {"--cache-dir", disk.path()});
  const auto read_all = [&] { check_files(mount.path(), dir / "data", 10); };
  std::string counter_name;
  SECTION("writes fail") {
    disk.set_rules("write /* errno=EIO\n");
    counter_name = "cache.errors_io";
  }
  SECTION("the disk is full") {
    disk.set_rules("write /* errno=ENOSPC\ncreate /* errno=ENOSPC\n");
    counter_name = "cache.errors_no_space";
  }
  SECTION("reads of copies fail") {
    read_all();
    wait_for_staging(mount);
    disk.set_rules("read /* errno=EIO\n");
    counter_name = "cache.dropped_damaged";
  }
  for (int round = 0; round < 2; ++round) {
    // From the disk, not the page cache: the reads reach the daemon and the copies.
    REQUIRE(tools::drop_page_cache());
    read_all();
    wait_for_staging(mount);
  }
  INFO(read_file(mount / ".epochfs/stats").value_or(""));
  CHECK(stat_of(mount, counter_name) > 0);
  disk.set_rules("");
}

// Lowers /proc/sys/fs/pipe-max-size for the life of the object: a process without
// CAP_SYS_RESOURCE then cannot grow a pipe past it (F_SETPIPE_SZ fails with EPERM), as an
// unprivileged daemon past pipe-user-pages-soft cannot.
class PipeMaxSize {
 public:
  explicit PipeMaxSize(const std::string& bytes) {
    std::ifstream("/proc/sys/fs/pipe-max-size") >> saved_;
    std::ofstream("/proc/sys/fs/pipe-max-size") << bytes;
  }

  ~PipeMaxSize() { std::ofstream("/proc/sys/fs/pipe-max-size") << saved_; }

  PipeMaxSize(const PipeMaxSize&) = delete;
  PipeMaxSize& operator=(const PipeMaxSize&) = delete;

 private:
  std::string saved_;
};

TEST_CASE("reads of a failing copy go to the source also when no pipe can be had",
          "[mount][faults]") {
  // A read of 100 kB needs a pipe of 25 pages; the default pipe has 16, and the daemon may not
  // grow it (no CAP_SYS_RESOURCE, pipe-max-size one page): the read is answered through a
  // buffer. Before, it was answered from the copy's descriptor, and the reader got EIO.
  PipeMaxSize small("4096");
  TempDir dir;
  write_files(dir / "data", 10, kSize);
  fs::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "data", dir / "mnt", {"--cache-dir", disk.path()},
              {"setpriv", "--bounding-set=-sys_resource", "--"});
  check_files(mount.path(), dir / "data", 10);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == 10);
  disk.set_rules("read /* errno=EIO\n");
  REQUIRE(tools::drop_page_cache());
  // One direct read of the whole file: the kernel passes it on as one READ of 100 kB, which
  // needs the pipe the daemon cannot have (page-cache reads may start with one page, which a
  // one-page pipe still takes).
  std::unique_ptr<char, decltype(&free)> buf(static_cast<char*>(aligned_alloc(4096, 1 << 20)),
                                             &free);
  for (int i = 0; i < 10; ++i) {
    const std::string name = "f" + std::to_string(i);
    cachestore::UniqueFd fd(::open((mount / name).c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    REQUIRE(fd.valid());
    const ssize_t n = ::read(fd.get(), buf.get(), 1 << 20);
    INFO(name << ": " << (n < 0 ? strerror(errno) : "read"));
    REQUIRE(n == static_cast<ssize_t>(kSize));
    CHECK(std::string(buf.get(), kSize) == read_file(dir / ("data/" + name)));
  }
  CHECK(stat_of(mount, "cache.dropped_damaged") == 10);
  disk.set_rules("");
}

TEST_CASE("a mount over a hung source is torn down, and its reader released", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 2, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  faults.set_rules("open /f0 hang\n");
  auto mount = std::make_unique<Mount>(faults.path(), dir / "mnt");
  // A reader process stuck in open(): the daemon's request waits on the hung source.
  const pid_t reader = fork();
  if (reader == 0) {
    const int fd = ::open((dir / "mnt/f0").c_str(), O_RDONLY);
    _exit(fd < 0 ? errno : 0);
  }
  REQUIRE(reader > 0);
  wait_injected(faults, 1);  // the daemon's open of f0 hangs in the source
  REQUIRE(tools::wait_exit(reader, milliseconds(10)) == std::nullopt);
  // Teardown: unmount, detach, then abort the connection and kill the daemon. Liveness only,
  // not a measure of speed: the daemon, held by the hung source, outlives the first 20 s wait
  // (kMountTimeout); under 30 s in all says that the abort and SIGKILL then ended it, without
  // the second 20 s wait, for a daemon that not even SIGKILL ends.
  const auto start = Clock::now();
  mount.reset();
  CHECK(Clock::now() - start < seconds(30));
  CHECK_FALSE(is_mounted(dir / "mnt"));
  // The reader got an error instead of staying stuck (in D state) forever. Liveness only: it
  // has ended at all within a generous 5 s.
  const auto code = tools::wait_exit(reader, seconds(5));
  REQUIRE(code.has_value());
  CHECK(*code != 0);
  CHECK(threads_in_d_state() == 0);
}

TEST_CASE("a source that refuses root gives EACCES and a hint", "[mount][faults]") {
  TempDir dir;
  write_files(dir / "data", 3, kSize);
  FaultFs faults(dir / "data", dir / "faulty");
  faults.set_rules("open /f1 errno=EACCES uid=0\n");
  Mount mount(faults.path(), dir / "mnt", {"--log-file", dir / "log"});
  CHECK(read_errno(mount / "f1") == EACCES);
  CHECK(read_errno(mount / "f1") == EACCES);
  check_same(mount / "f0", dir / "data/f0");
  const std::string log = read_file(dir / "log").value_or("");
  INFO(log);
  CHECK(contains(log,
                 "the source refused root: open f1: Permission denied (an NFS export with "
                 "root_squash?"));
}

TEST_CASE("a hung cache disk holds up no reader for long", "[mount][faults]") {
  // docs/reliability.md C8: --cache-dir on faultfs whose writes, or creates, hang (a dead local
  // disk), with an order published so that copies run ahead of the reader. Every copy sticks;
  // readers must still get every file, from the source, without waiting on the stuck copies
  // for long. The reader is a child process, so a stuck one cannot hold up the test.
  const std::string rule = GENERATE(as<std::string>{}, "write /* hang\n", "create /* hang\n");
  INFO(rule);
  TempDir dir;
  constexpr int kFiles = 40;
  write_files(dir / "data", kFiles, kSize);
  fs::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "data", dir / "mnt", {"--cache-dir", disk.path()});
  disk.set_rules(rule);
  std::string order;
  for (int i = 0; i < kFiles; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  REQUIRE(publish(mount, order) == 0);
  const auto start = Clock::now();
  const pid_t reader = fork_checked_reader(dir / "mnt", dir / "data", 0, kFiles);
  REQUIRE(reader >= 0);
  // Liveness only: the reader finishes at all within a generous 60 s. With a wait of up to
  // 30 s for each stuck copy (the bug this test came with), it took 30 s per file. How long it
  // takes now (about 2 s, docs/reliability.md C8) is a figure for a benchmark, not asserted here
  // (docs/benchmarks.md has no measurement of it yet).
  const auto code = tools::wait_exit(reader, seconds(60));
  const auto took = std::chrono::duration<double>(Clock::now() - start).count();
  if (!code) {
    ::kill(reader, SIGKILL);
  }
  disk.set_rules("");
  disk.release();
  if (!code) {
    (void)tools::wait_exit(reader, seconds(10));
  }
  INFO(read_file(mount / ".epochfs/stats").value_or(""));
  INFO(kFiles << " files read over a hung cache disk in " << took << " s");
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  // The reader gave up on a stuck copy instead of waiting for it to end.
  CHECK(stat_of(mount, "waits_abandoned") >= 1);
}

TEST_CASE("reads of cached copies on a hung cache disk go to the source", "[mount][faults]") {
  // docs/reliability.md C8, the other half: every file is cached, then the cache disk stops
  // answering reads. The first reader is stuck with the disk (its read is already there);
  // every open after the stuck read is 2 s old must be served from the source, with the right
  // bytes, and once the disk answers again the copies serve hits again: the cache is not
  // turned off for good. Readers are child processes, so a stuck one cannot hold up the test.
  TempDir dir;
  constexpr int kFiles = 10;
  write_files(dir / "data", kFiles, kSize);
  fs::create_directories(dir / "cachedisk");
  FaultFs disk(dir / "cachedisk", dir / "cache");
  Mount mount(dir / "data", dir / "mnt", {"--cache-dir", disk.path()});
  std::string order;
  for (int i = 0; i < kFiles; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  REQUIRE(publish(mount, order) == 0);
  // Not wait_for_staging: the planner queues the copies after the publish returns, so "none
  // queued" can come before the first is.
  for (int i = 0; i < 1000 && stat_of(mount, "cache.files_cached") < kFiles; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  REQUIRE(stat_of(mount, "cache.files_cached") == kFiles);
  const auto read_right = [&](int from, int to) {
    return fork_checked_reader(dir / "mnt", dir / "data", from, to);
  };
  const auto reap = [](pid_t pid, std::optional<int> code) {
    if (!code) {
      ::kill(pid, SIGKILL);
      (void)tools::wait_exit(pid, seconds(10));
    }
  };
  disk.set_rules("read /* hang\n");
  const pid_t stuck = read_right(0, 1);
  REQUIRE(stuck > 0);
  wait_injected(disk, 1);  // the stuck reader's read of its copy hangs in the disk
  // Past the 2 s after which the daemon takes a call on the disk for hung (stuck_io_s).
  std::this_thread::sleep_for(milliseconds(2500));
  const auto start = Clock::now();
  const pid_t others = read_right(1, kFiles);
  // Liveness only: the other readers finish at all within a generous 30 s (before the fix they
  // hung with the disk). How long they take is not asserted: they are counted below.
  const auto others_code = tools::wait_exit(others, seconds(30));
  const auto took = std::chrono::duration<double>(Clock::now() - start).count();
  const bool stuck_before_release = !tools::wait_exit(stuck, seconds(0)).has_value();
  disk.set_rules("");
  disk.release();
  const auto stuck_code = tools::wait_exit(stuck, seconds(30));
  reap(others, others_code);
  reap(stuck, stuck_code);
  INFO(read_file(mount / ".epochfs/stats").value_or(""));
  INFO((kFiles - 1) << " files read beside a hung read of the cache disk in " << took << " s");
  REQUIRE(others_code.has_value());
  CHECK(*others_code == 0);
  CHECK(stuck_before_release);  // the hang was real
  REQUIRE(stuck_code.has_value());
  CHECK(*stuck_code == 0);
  CHECK(stat_of(mount, "cache.hung_disk_bypasses") == kFiles - 1);
  // The disk answers again: the copies serve again.
  const auto hits = stat_of(mount, "hits");
  REQUIRE(tools::wait_exit(read_right(1, kFiles), seconds(30)) == std::optional<int>(0));
  CHECK(stat_of(mount, "hits") == hits + kFiles - 1);
}

TEST_CASE("source directories renamed and replaced under readers and prefetch", "[mount][faults]") {
  // docs/reliability.md F9: a directory of the source renamed back and forth while readers and
  // prefetch go through it, then replaced by a file of the same name and by a directory with
  // new files. Reads give the right bytes or ENOENT/ENOTDIR/ESTALE, never another file's or an old
  // version's; once the timeouts have passed, listings match the source.
  TempDir dir;
  constexpr int kFiles = 10;
  const std::string src = dir / "src";
  write_files(src + "/d0", kFiles, 40000);
  write_files(dir / "ref", kFiles, 40000);  // the same bytes, out of the way
  write_files(src + "/d1", kFiles, 40000);
  Mount mount(src, dir / "mnt");
  std::string order = "#epoch 0\n";
  for (int i = 0; i < kFiles; ++i) {
    order += "d0/f" + std::to_string(i) + "\n";
  }
  std::atomic<bool> stop{false};
  std::atomic<int> renames{0};
  std::thread churn([&] {
    while (!stop) {
      fs::rename(src + "/d0", src + "/d0x");
      fs::rename(src + "/d0x", src + "/d0");
      renames += 2;
      // Back in place for a moment each time: unthrottled, a slow build (TSan) saw only ENOENT.
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  uint64_t right = 0;
  uint64_t missing = 0;
  const auto until = Clock::now() + seconds(3);
  while (Clock::now() < until) {
    REQUIRE(publish(mount, order) == 0);
    for (int i = 0; i < kFiles; ++i) {
      const std::string name = "/f" + std::to_string(i);
      const auto got = tools::file_digest(mount / ("d0" + name));
      if (!got.is_ok()) {
        // ESTALE when the directory moved again before the kernel's one retry of the open
        // (docs/semantics.md): seen once in about 30 runs, more under TSan.
        INFO(got.status().to_string());
        CHECK((got.error_code() == ENOENT || got.error_code() == ENOTDIR ||
               got.error_code() == ESTALE));
        ++missing;
        continue;
      }
      CHECK(got.value() == tools::file_digest(dir / "ref" + name).value());
      ++right;
    }
  }
  stop = true;
  churn.join();
  INFO(renames << " renames, " << right << " reads right, " << missing << " ENOENT");
  CHECK(right > 0);

  // d1 becomes a file; d0 a new directory whose files have new contents (version 2).
  fs::remove_all(src + "/d1");
  std::ofstream(src + "/d1") << "now a file";
  fs::rename(src + "/d0", src + "/old");
  write_files(src + "/d0", kFiles, 40000, 2);
  std::this_thread::sleep_for(milliseconds(1500));  // past the attribute and entry timeouts
  CHECK(read_file(mount / "d1") == "now a file");
  check_files(mount / "d0", src + "/d0", kFiles);
  check_files(mount / "old", src + "/old", kFiles);
  const auto names = [](const std::string& path) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) {
      out.insert(e.path().filename().string() + (e.is_directory() ? "/" : ""));
    }
    return out;
  };
  CHECK(names(mount.path()) == names(src));
  CHECK(names(mount / "d0") == names(src + "/d0"));
}

}  // namespace epochfs::test
