// Bad input through every publishing channel (RELIABILITY.md, rows I): the same text written
// into <mount>/.epochfs/, given to `epochfs publish` and dropped at --shuffle-file gets the
// same verdict, the same entries accepted and rejected, and reads go on; and the security rows
// that concern the control directory, the cache directory and the mount's options (S).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/stats_doc.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

struct Verdict {
  bool ok = false;
  double accepted = 0;
  double rejected = 0;

  bool operator==(const Verdict&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Verdict& v) {
  return os << (v.ok ? "ok" : "refused") << " accepted " << v.accepted << " rejected "
            << v.rejected;
}

Verdict last_verdict(const Mount& mount) {
  const auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  Verdict v;
  v.ok = doc->values.at("prefetch.last_publish.ok") == "true";
  v.accepted = doc->number("prefetch.last_publish.accepted").value_or(-1);
  v.rejected = doc->number("prefetch.last_publish.rejected").value_or(-1);
  return v;
}

void wait_publishes(const Mount& mount, double n) {
  for (int i = 0; i < 500 && stat_of(mount, "prefetch.publishes") < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(stat_of(mount, "prefetch.publishes") == n);
}

std::string random_junk(size_t n) {
  std::mt19937 rng(3);
  std::string s(n, '\0');
  for (auto& c : s) {
    c = static_cast<char>(rng());
  }
  return s;
}

}  // namespace

TEST_CASE("bad orders get the same verdict through all three channels", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 10, 1000);

  struct Case {
    std::string name;
    std::string text;
  };

  const std::vector<Case> cases = {
      {"empty", ""},
      {"comments and blank lines only", "# a comment\n\n\n"},
      {"a header only", "#count 0\n"},
      {"traversal", "../x\nf1/../../x\n./f1\nf2//\n.\n..\nf3\n"},
      {"absolute paths", "/etc/shadow\n/proc/self/mem\n//etc\n" + dir / "src/f4" + "\nf5\n"},
      {"a UTF-8 BOM",
       "\xEF\xBB\xBF"
       "f1\nf2\n"},
      {"CR, tabs and spaces", "f1\r\nf2\r\r\nf3\t\nf4 \n f5\n"},
      {"NUL inside a line", std::string("f1\nf\0"
                                        "2\nf3\n",
                                        10)},
      {"invalid UTF-8", "f1\n\xff\xfe\nf2\n"},
      {"indices without a manifest", "#form indices\n1\n2\n"},
      {"binary junk", random_junk(4096)},
      {"duplicates and aliases", "f1\nf1\n./f1\nf1\n"},
      {"a line of 5000 bytes", std::string(5000, 'a') + "\nf1\n"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string watched = dir / "orders/order.txt";
      fs::create_directories(dir / "orders");
      Mount mount(dir / "src", dir / "mnt", {"--shuffle-file", watched});
      // The control directory.
      const int err = publish(mount, c.text);
      wait_publishes(mount, 1);
      const Verdict control = last_verdict(mount);
      INFO("control directory: " << control);
      CHECK((err == 0) == control.ok);
      // epochfs publish.
      std::ofstream(dir / "order.txt", std::ios::binary) << c.text;
      const CommandResult cli = run_epochfs({"publish", mount.path(), dir / "order.txt"});
      wait_publishes(mount, 2);
      const Verdict by_cli = last_verdict(mount);
      INFO("epochfs publish: " << by_cli << ": " << cli.output);
      CHECK((cli.exit_code == 0) == by_cli.ok);
      // --shuffle-file, replaced atomically.
      std::ofstream(dir / "orders/.tmp", std::ios::binary) << c.text;
      fs::rename(dir / "orders/.tmp", watched);
      wait_publishes(mount, 3);
      const Verdict watcher = last_verdict(mount);
      INFO("--shuffle-file: " << watcher);
      CHECK(by_cli == control);
      CHECK(watcher == control);
      // Nothing outside the root was read in, and reads go on.
      CHECK(stat_of(mount, "cache.files_cached") <= 10);
      check_same(mount / "f0", dir / "src/f0");
    }
  }
}

TEST_CASE("only the mounting user may publish; others may read the stats", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 3, 1000);
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  Mount mount(dir / "src", dir / "mnt", {"--allow-other"});
  const std::string order = mount / ".epochfs/order";
  CHECK(run_as_nobody([&] {
          const int fd = ::open(order.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
          return fd < 0 ? errno : 0;
        }) == EACCES);
  CHECK(run_as_nobody([&] {
          const int fd = ::open((mount / ".epochfs/stats").c_str(), O_RDONLY | O_CLOEXEC);
          return fd < 0 ? errno : 0;
        }) == 0);
  CHECK(stat_of(mount, "prefetch.publishes") == 0);
}

TEST_CASE("the mount is nosuid and nodev", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 1, 10);
  Mount mount(dir / "src", dir / "mnt");
  const CommandResult r = run_command({"findmnt", "-no", "OPTIONS", mount.path()});
  INFO(r.output);
  CHECK(contains(r.output, "nosuid"));
  CHECK(contains(r.output, "nodev"));
}

TEST_CASE("cached copies are private even under umask 000", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 3, 5000);
  const mode_t old_umask = ::umask(0);
  {
    Mount mount(dir / "src", dir / "mnt", {"--cache-dir", dir / "cache"});
    for (int i = 0; i < 3; ++i) {
      check_same(mount / ("f" + std::to_string(i)), dir / ("src/f" + std::to_string(i)));
    }
    wait_for_staging(mount);
    const std::string managed = tools::read_stats(mount.path())->values["cache.dir"];
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(managed)) {
      struct stat st;
      REQUIRE(::lstat(e.path().c_str(), &st) == 0);
      INFO(e.path());
      if (S_ISDIR(st.st_mode)) {
        CHECK((st.st_mode & 0777) == 0700);
      } else {
        CHECK((st.st_mode & 0077) == 0);
        ++files;
      }
    }
    CHECK(files >= 3);
  }
  ::umask(old_umask);
}

TEST_CASE("symlinks planted in the cache directory are never followed", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 3, 5000);
  fs::create_directories(dir / "victim");
  std::ofstream(dir / "victim/precious") << "keep";
  fs::create_directories(dir / "cache");
  // Everything a predictable name could be: links to the victim file and directory.
  for (const char* name : {"lock", "index", "f0", "f1", "tmp"}) {
    fs::create_symlink(dir / "victim/precious", dir / ("cache/" + std::string(name)));
  }
  fs::create_directory_symlink(dir / "victim", dir / "cache/link-to-victim");
  {
    Mount mount(dir / "src", dir / "mnt", {"--cache-dir", dir / "cache"});
    for (int i = 0; i < 3; ++i) {
      check_same(mount / ("f" + std::to_string(i)), dir / ("src/f" + std::to_string(i)));
    }
    wait_for_staging(mount);
    const std::string managed = tools::read_stats(mount.path())->values["cache.dir"];
    // Inside the managed directory there are only regular files and directories.
    for (const auto& e : fs::recursive_directory_iterator(managed)) {
      CHECK_FALSE(e.is_symlink());
    }
  }
  CHECK(read_file(dir / "victim/precious") == "keep");
  CHECK(fs::is_symlink(dir / "cache/link-to-victim"));
  CHECK(fs::exists(dir / "victim"));
}

TEST_CASE("the log file is not world-readable and paths in it are escaped", "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 1, 10);
  Mount mount(dir / "src", dir / "mnt", {"--log-file", dir / "log"});
  // An order entry with an escape sequence and a tab: skipped, and logged escaped.
  REQUIRE(publish(mount, "f0\nno\x1b[2Jsuch\tfile\n") == 0);
  struct stat st;
  REQUIRE(::stat((dir / "log").c_str(), &st) == 0);
  CHECK((st.st_mode & 0007) == 0);
  const std::string log = read_file(dir / "log").value_or("");
  INFO(log);
  CHECK(log.find('\x1b') == std::string::npos);
  // The stats document stays valid JSON around it.
  CHECK(tools::read_stats(mount.path()).has_value());
}

TEST_CASE("a dataset's own .epochfs is shadowed, and orders cannot name it", "[mount][input]") {
  // RELIABILITY.md S6: the control directory hides a real .epochfs at the top of the source,
  // so an order naming anything under it is refused entry by entry, and the hidden file never
  // enters the cache. A .epochfs deeper down is an ordinary name.
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "src/.epochfs");
  std::ofstream(dir / "src/.epochfs/x") << "SHADOWED";
  fs::create_directories(dir / "src/sub/.epochfs");
  std::ofstream(dir / "src/sub/.epochfs/y") << "inner";
  Mount mount(dir / "src", dir / "mnt");
  REQUIRE(publish(mount,
                  ".epochfs/stats\n.epochfs/x\n./.epochfs/verify\nsub/.epochfs/y\nhello.txt\n") ==
          0);
  CHECK(last_verdict(mount) == Verdict{true, 2, 3});
  CHECK(::access((mount / ".epochfs/x").c_str(), F_OK) != 0);
  CHECK(errno == ENOENT);
  CHECK(read_file(mount / "sub/.epochfs/y") == "inner");
  CHECK(read_file(mount / "hello.txt") == "hello");
  wait_for_staging(mount);
  for (const auto& e : fs::recursive_directory_iterator(mount.cache_root())) {
    if (e.is_regular_file()) {
      CHECK(read_file(e.path()).value_or("") != "SHADOWED");
    }
  }
}

}  // namespace epochfs::test
