// What an open of a cached file costs in the kernel's requests, each a round trip of 21-29 us
// on the machines measured (docs/benchmarks.md): counted, so that a change that adds one per
// open fails here rather than in a benchmark.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::test {
namespace {

constexpr int kFiles = 20;

std::string order_of(const std::string& header) {
  std::string text = header;
  for (int i = 0; i < kFiles; ++i) {
    text += "f" + std::to_string(i) + "\n";
  }
  return text;
}

// As Python's open() and a read of the whole file do: open, fstat, isatty, read to the end,
// close.
bool read_as_python_does(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }

  struct stat st {};

  bool ok = ::fstat(fd, &st) == 0 && isatty(fd) == 0;
  char buf[65536];
  ssize_t n = 0;
  while (ok && (n = ::read(fd, buf, sizeof(buf))) > 0) {
  }
  ok = ok && n == 0;
  return ::close(fd) == 0 && ok;
}

const char* const kKinds[] = {"lookup", "getattr", "open", "read", "release", "ioctl", "other"};

using Requests = std::map<std::string, double>;

// The kernel's requests by kind so far, and the hits, from one read of the stats.
Requests requests(const Mount& mount) {
  const auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  Requests r;
  for (const char* kind : kKinds) {
    r[kind] = doc->number(std::string("requests.") + kind).value_or(-1);
  }
  r["hits"] = doc->number("hits").value_or(-1);
  return r;
}

// The sysfs file of the readahead window of the mount at path.
std::string read_ahead_file(const std::string& path) {
  struct stat st {};

  REQUIRE(::stat(path.c_str(), &st) == 0);
  return "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
         std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
}

Requests minus(Requests a, const Requests& b, double times = 1) {
  for (auto& [kind, n] : a) {
    n -= times * b.at(kind);
  }
  return a;
}

}  // namespace

TEST_CASE("an open of a cached file costs OPEN, IOCTL, RELEASE and one LOOKUP or GETATTR",
          "[mount][per_hit]") {
  if (!opens_reach_daemon()) {
    WARN("SKIPPED: with no-open the kernel sends no OPEN or RELEASE");
    return;
  }
  TempDir dir;
  write_files(dir / "src", kFiles, 50000);
  Mount mount(dir / "src", dir / "mnt");
  REQUIRE(publish(mount, order_of("#epoch 0\n")) == 0);
  for (int i = 0; i < kFiles; ++i) {
    REQUIRE(read_as_python_does(mount / ("f" + std::to_string(i))));
  }
  REQUIRE(publish(mount, order_of("#epoch 1\n")) == 0);
  // As between two epochs: the names and attributes the kernel was given (1 s) lapsed.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // What one read of the stats costs (.epochfs/stats is looked up and opened each time).
  (void)requests(mount);
  const Requests first = requests(mount);
  const Requests before = requests(mount);
  const Requests per_read = minus(before, first);
  for (int i = 0; i < kFiles; ++i) {
    REQUIRE(read_as_python_does(mount / ("f" + std::to_string(i))));
  }
  // RELEASE is sent in the background: wait for the last ones.
  Requests grew;
  for (int reads = 1; reads < 1000; ++reads) {
    grew = minus(minus(requests(mount), before), per_read, reads);
    if (grew["release"] >= kFiles) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string figures;
  for (const auto& [kind, n] : grew) {
    figures += kind + " " + std::to_string(static_cast<int>(n)) + "; ";
  }
  INFO(figures);
  CHECK(grew["hits"] == kFiles);
  CHECK(grew["open"] == kFiles);
  CHECK(grew["release"] == kFiles);
  // The lapsed name is looked up again; its answer is the attributes the fstat() wants. (Kept
  // longer, the name would need no LOOKUP, but the kernel marks atime stale at every read of
  // a writable mount's file, so the next open's fstat() asks a GETATTR instead: no saving.)
  CHECK(grew["lookup"] + grew["getattr"] <= kFiles);
  CHECK(grew["ioctl"] == kFiles);  // isatty()
  CHECK(grew["other"] == 0);
  // Classic reads a 50,000-byte copy in one READ (and one at its end); passthrough in none.
  CHECK(grew["read"] <= 2 * kFiles);
}

// A memory-mapped dataset is read a window per page fault: the window decides its READs.
TEST_CASE("a file is read in windows of --read-ahead KiB, the kernel's unless told",
          "[mount][per_hit]") {
  TempDir dir;
  constexpr uint64_t kBytes = 8 << 20;
  write_files(dir / "src", 1, kBytes);
  for (const char* kb : {"1024", ""}) {
    std::vector<std::string> args = {"--data-path", "classic", "--no-cache"};
    if (*kb != '\0') {
      args.insert(args.end(), {"--read-ahead", kb});
    }
    Mount mount(dir / "src", dir / (std::string("mnt") + kb), args);
    const std::string window = read_ahead_file(mount.path());
    if (::access(window.c_str(), W_OK) != 0) {
      WARN("SKIPPED: " << window << " cannot be written here (read-only sysfs)");
      return;
    }
    const Requests before = requests(mount);
    REQUIRE(read_file(mount / "f0").value_or("").size() == kBytes);
    const double reads = minus(requests(mount), before)["read"];
    const auto set = read_file(window);
    INFO("--read-ahead " << kb << ": " << reads << " READs; read_ahead_kb " << set.value_or("?"));
    if (*kb != '\0') {
      CHECK(set == "1024\n");
      CHECK(reads <= 2 * kBytes / (1 << 20));
    } else {
      CHECK(set == "128\n");  // the kernel's own
      CHECK(reads >= kBytes / (128 << 10));
    }
  }
}

}  // namespace epochfs::test
