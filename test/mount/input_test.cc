// Bad input through every publishing channel (docs/reliability.md, rows I): the same text written
// into <mount>/.epochfs/, given to `epochfs publish` and dropped at --shuffle-file gets the
// same verdict, the same entries accepted and rejected, and reads go on; and the security rows
// that concern the control directory, the cache directory and the mount's options (S).
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/dataset.h"

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
      // An empty file is refused at release, after its close returned 0 (Filesystem::flush).
      CHECK((err == 0) == (control.ok || c.text.empty()));
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

TEST_CASE("every user may publish into jobs of their own and all may read the stats",
          "[mount][input]") {
  TempDir dir;
  write_files(dir / "src", 3, 1000);
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  Mount mount(dir / "src", dir / "mnt", {"--allow-other"});
  // The same stream name, from the same session, by root and by another user: two streams.
  CHECK(write_order(mount, "#stream rank0\nf0\nf1\n") == 0);
  CHECK(run_as_nobody([&] { return write_order(mount, "#stream rank0\n#epoch 5\nf2\n"); }) == 0);
  CHECK(run_as_nobody([&] {
          const int fd = ::open((mount / ".epochfs/stats").c_str(), O_RDONLY | O_CLOEXEC);
          return fd < 0 ? errno : 0;
        }) == 0);
  CHECK(stat_of(mount, "prefetch.publishes") == 2);
  CHECK(stat_of(mount, "prefetch.jobs") == 2);
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  std::map<std::string, std::string> epoch_by_user;
  for (const auto& [key, value] : doc->values) {
    const std::string suffix = ".user";
    if (key.rfind("prefetch.streams.", 0) == 0 && key.size() > suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string stream = key.substr(0, key.size() - suffix.size());
      CHECK(doc->values.at(stream + ".stream") == "rank0");
      epoch_by_user[value] = doc->values.at(stream + ".epoch");
    }
  }
  // Neither publish touched the other's stream: root's is at epoch 0, nobody's at 5.
  CHECK(epoch_by_user == std::map<std::string, std::string>{{"0", "0"}, {"65534", "5"}});
}

TEST_CASE("the mount is nosuid and nodev", "[mount][input]") {
  // S8, and S9: a root daemon that lets every user in (--allow-other) too.
  for (const std::vector<std::string>& args : {std::vector<std::string>{}, {"--allow-other"}}) {
    TempDir dir;
    write_files(dir / "src", 1, 10);
    Mount mount(dir / "src", dir / "mnt", args);
    const CommandResult r = run_command({"findmnt", "-no", "OPTIONS", mount.path()});
    INFO(r.output);
    CHECK(contains(r.output, "nosuid"));
    CHECK(contains(r.output, "nodev"));
  }
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
  // docs/reliability.md S6: the control directory hides a real .epochfs at the top of the source,
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

TEST_CASE("directives and epochs through the control directory do as documented",
          "[mount][input]") {
  // docs/reliability.md I10 through a real mount (the parser's tests cover each case in detail).
  TempDir dir;
  make_small_source(dir / "src");
  std::ofstream(dir / "src/#x") << "hash";
  for (int i = 0; i < 4; ++i) {
    std::ofstream(dir / ("src/f" + std::to_string(i))) << i;
  }
  Mount mount(dir / "src", dir / "mnt");
  // An unknown directive is a comment; a repeated one is ignored (the first counts).
  CHECK(publish(mount, "#shuffle yes\n#epoch 3\n#epoch 4\nf0\nf1\n") == 0);
  CHECK(last_verdict(mount) == Verdict{true, 2, 0});
  CHECK(stat_of(mount, "prefetch.streams.default.epoch") == 3);
  for (const char* bad : {"#epoch -1\nf0\n", "#epoch x\nf0\n", "#epoch 1.5\nf0\n"}) {
    INFO(bad);
    CHECK(publish(mount, bad) == 0);  // the directive skipped, the entry kept
    CHECK(last_verdict(mount) == Verdict{true, 1, 1});
  }
  // Those went to epochs 4, 5 and 6 (the next after the last published); a fifth epoch held
  // is refused.
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 3);
  CHECK(publish(mount, "#epoch 7\nf0\n") == EINVAL);
  CHECK(stat_of(mount, "prefetch.streams.default.epoch") == 3);
  // The same epoch again replaces its order.
  CHECK(publish(mount, "#epoch 5\nf0\nf1\nf2\nf3\n") == 0);
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 3);
  // An epoch older than the current one starts the stream again (a rerun, a restart).
  CHECK(publish(mount, "#epoch 2\nf0\nf1\n") == 0);
  CHECK(stat_of(mount, "prefetch.streams.default.epoch") == 2);
  CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 0);
  CHECK(stat_of(mount, "prefetch.streams.default.restarts") == 1);
  // A header line after an entry is a comment; a file whose name starts with # is named
  // with ./ in front.
  CHECK(publish(mount, "#stream late\nf0\n#epoch 9\n./#x\n#x\n") == 0);
  CHECK(last_verdict(mount) == Verdict{true, 2, 0});
  CHECK(stat_of(mount, "prefetch.streams.late.epoch") == 0);
  CHECK(read_file(mount / "#x") == "hash");
  // One stream id from two writers: the later publish of an epoch wins.
  CHECK(publish(mount, "#stream shared\n#epoch 0\nf0\n", "a") == 0);
  CHECK(publish(mount, "#stream shared\n#epoch 0\nf1\nf2\n", "b") == 0);
  CHECK(stat_of(mount, "prefetch.streams.shared.epoch_length") == 2);
}

namespace {

// Every offset from 1 to n - 1: one byte per write.
std::vector<size_t> every_byte(size_t n) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < n; ++i) {
    cuts.push_back(i);
  }
  return cuts;
}

std::string rejected_examples(const Mount& mount) {
  const auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  std::string all;
  for (int i = 0; i < 5; ++i) {
    const auto it =
        doc->values.find("prefetch.last_publish.rejected_examples." + std::to_string(i));
    all += it == doc->values.end() ? "" : it->second + "\n";
  }
  return all;
}

}  // namespace

TEST_CASE("control files publish the same order however they are written", "[mount][input]") {
  // docs/reliability.md I11: the bytes of an order (CRLF line ends, multibyte UTF-8 names, a bad
  // line) arrive in one write, one byte per write, in 128 KiB chunks, and cut inside a CRLF and
  // inside a UTF-8 sequence: every way gives the same verdict, entry for entry.
  TempDir dir;
  const std::vector<std::string> names = {"é/ñandú-0", "日本/画像-1", "ü-2 space", "plain-3"};
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = dir / ("src/" + names[i]);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << "file " << i;
  }
  Mount mount(dir / "src", dir / "mnt");
  std::string small = "#stream s\r\n#epoch 0\r\n";  // each publish replaces it
  for (int i = 0; i < 40; ++i) {
    small += names[static_cast<size_t>(i) % names.size()] + "\r\n";
  }
  small += "../bad\r\n\xff\xfe\r\n";
  REQUIRE(publish(mount, small) == 0);
  const Verdict whole = last_verdict(mount);
  const std::string examples = rejected_examples(mount);
  CHECK(whole == Verdict{true, 40, 2});

  const size_t crlf = small.find("\r\n");
  const size_t multibyte = small.find("\xc3\xa9");  // é
  for (const auto& cuts : {every_byte(small.size()), std::vector<size_t>{crlf + 1},
                           std::vector<size_t>{multibyte + 1}, std::vector<size_t>{3, 4, 5}}) {
    CHECK(publish(mount, small, "order", cuts) == 0);
    CHECK(last_verdict(mount) == whole);
    CHECK(rejected_examples(mount) == examples);
  }

  // About 1 MiB in 128 KiB writes: the cuts fall wherever they fall.
  std::string big = "#stream s\r\n#epoch 0\r\n";
  for (int i = 0; i < 40000; ++i) {
    big += names[static_cast<size_t>(i) % names.size()] + "\r\n";
  }
  REQUIRE(publish(mount, big) == 0);
  const Verdict big_whole = last_verdict(mount);
  // Each of the 4 names counts 16 times in one epoch; the other repeats are skipped.
  CHECK(big_whole == Verdict{true, 64, 40000 - 64});
  std::vector<size_t> chunks;
  for (size_t at = 128 * 1024; at < big.size(); at += 128 * 1024) {
    chunks.push_back(at);
  }
  CHECK(publish(mount, big, "order", chunks) == 0);
  CHECK(last_verdict(mount) == big_whole);
  CHECK(stat_of(mount, "prefetch.publish_failures") == 0);
}

TEST_CASE("control files: odd writes, killed writers and other operations", "[mount][input]") {
  // docs/reliability.md I11: what each way of using the control directory does, as documented in
  // docs/user-guide.md ("Three ways to publish").
  TempDir dir;
  make_small_source(dir / "src");
  for (int i = 0; i < 20; ++i) {
    std::ofstream(dir / ("src/f" + std::to_string(i))) << i;
  }
  Mount mount(dir / "src", dir / "mnt");
  std::string order;
  for (int i = 0; i < 20; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  REQUIRE(publish(mount, "#epoch 0\n" + order) == 0);
  const std::string control = mount / ".epochfs/";

  SECTION("a write that leaves a hole fails, and the file is not published") {
    cachestore::UniqueFd fd(::open((control + "holed").c_str(), O_WRONLY | O_CREAT, 0600));
    REQUIRE(fd.valid());
    REQUIRE(::pwrite(fd.get(), "f1\n", 3, 0) == 3);
    CHECK(::pwrite(fd.get(), "f2\n", 3, 100) < 0);
    CHECK(errno == EINVAL);
    CHECK(::close(fd.release()) != 0);
    CHECK(stat_of(mount, "prefetch.streams.default.epoch_length") == 20);
  }
  SECTION("O_APPEND writes publish") {
    cachestore::UniqueFd fd(
        ::open((control + "appended").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600));
    REQUIRE(fd.valid());
    for (int i = 0; i < 5; ++i) {
      REQUIRE(::write(fd.get(), "f1\n", 3) == 3);
    }
    CHECK(::close(fd.release()) == 0);
    CHECK(last_verdict(mount) == Verdict{true, 5, 0});
  }
  SECTION("two writers of one name publish two orders, each whole") {
    cachestore::UniqueFd a(::open((control + "same").c_str(), O_WRONLY | O_CREAT, 0600));
    cachestore::UniqueFd b(::open((control + "same").c_str(), O_WRONLY | O_CREAT, 0600));
    REQUIRE(a.valid());
    REQUIRE(b.valid());
    const std::string first = "#stream one\nf1\nf2\n";
    const std::string second = "#stream two\nf3\nf4\nf5\n";
    REQUIRE(::write(a.get(), first.data(), 7) == 7);
    REQUIRE(::write(b.get(), second.data(), second.size()) == static_cast<ssize_t>(second.size()));
    REQUIRE(::write(a.get(), first.data() + 7, first.size() - 7) ==
            static_cast<ssize_t>(first.size() - 7));
    CHECK(::close(b.release()) == 0);
    CHECK(::close(a.release()) == 0);
    CHECK(stat_of(mount, "prefetch.streams.one.epoch_length") == 2);
    CHECK(stat_of(mount, "prefetch.streams.two.epoch_length") == 3);
  }
  SECTION("a writer killed mid-file publishes nothing when the order has #count") {
    for (const bool counted : {true, false}) {
      const pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        const int fd = ::open((control + "killed").c_str(), O_WRONLY | O_CREAT, 0600);
        const std::string text =
            std::string(counted ? "#count 20\n" : "") + "#epoch 1\n" + order.substr(0, 30);
        (void)!::write(fd, text.data(), text.size());
        ::raise(SIGKILL);
      }
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      REQUIRE(WIFSIGNALED(status));
    }
    // The counted one refused; the plain list published as it stood (documented), its last
    // line cut and so naming no file.
    CHECK(stat_of(mount, "prefetch.publish_failures") == 1);
    CHECK(stat_of(mount, "prefetch.streams.default.epochs_queued") == 1);
  }
  SECTION("shell redirections publish; an empty file is refused without failing its close") {
    // The shell opens the file, moves the fd onto stdout and closes the one it opened before
    // writing: that first close must not publish (it refused the empty order and turned the
    // writes away, with `write error: Invalid argument`).
    auto r = run_command({"bash", "-c", "printf 'f0\\nf1\\n' > " + control + "by-shell"});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(stat_of(mount, "prefetch.publishes") == 2);
    CHECK(last_verdict(mount) == Verdict{true, 2, 0});
    std::ofstream(dir / "list.txt") << order;
    r = run_command({"bash", "-c", "cat " + dir / "list.txt" + " >> " + control + "appended"});
    CHECK(r.exit_code == 0);
    CHECK(last_verdict(mount) == Verdict{true, 20, 0});
    CHECK(run_command({"bash", "-c", ": > " + control + "empty"}).exit_code == 0);
    wait_publishes(mount, 4);  // at release, after the close has returned
    CHECK_FALSE(last_verdict(mount).ok);
  }
  SECTION("a child's close of the writer's descriptor does not publish") {
    // A command substitution, or any command the writing shell runs, inherits the descriptor
    // and closes it when it ends: that close published the header alone and turned the
    // entries away (`write error: Invalid argument`, "not published: no entries").
    auto r = run_command({"bash", "-c",
                          "{ echo '#epoch 0'; for f in $(echo f0 f1 f2); do echo $f; done; "
                          "/bin/true; echo f3; } > " +
                              control + "by-script"});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(last_verdict(mount) == Verdict{true, 4, 0});
    CHECK(stat_of(mount, "prefetch.publishes") == 2);
  }
  SECTION("mv and cp from another filesystem publish") {
    std::ofstream(dir / "moved.txt") << order;
    auto r = run_command({"mv", dir / "moved.txt", control + "moved"});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(stat_of(mount, "prefetch.publishes") == 2);
    std::ofstream(dir / "copied.txt") << order;
    CHECK(run_command({"cp", dir / "copied.txt", control + "copied"}).exit_code == 0);
    CHECK(stat_of(mount, "prefetch.publishes") == 3);
    CHECK(fs::is_empty(control) == false);  // stats, verify, metrics; nothing else is listed
    std::vector<std::string> listed;
    for (const auto& e : fs::directory_iterator(control)) {
      listed.push_back(e.path().filename());
    }
    std::sort(listed.begin(), listed.end());
    CHECK(listed == std::vector<std::string>{"metrics", "stats", "verify"});
  }
  SECTION("names of 255 bytes work, longer ones and other operations fail") {
    CHECK(publish(mount, order, std::string(255, 'n')) == 0);
    CHECK(::open((control + std::string(256, 'n')).c_str(), O_WRONLY | O_CREAT, 0600) < 0);
    CHECK(errno == ENAMETOOLONG);
    CHECK(::mkdir((control + "d").c_str(), 0700) != 0);
    CHECK(::link((control + "stats").c_str(), (control + "l").c_str()) != 0);
    CHECK(::symlink("x", (control + "s").c_str()) != 0);
    CHECK(::unlink((control + "stats").c_str()) != 0);
    CHECK(::rename((control + "stats").c_str(), (control + "t").c_str()) != 0);
    for (const char* name : {"stats", "verify", "metrics"}) {
      INFO(name);
      CHECK(::open((control + name).c_str(), O_WRONLY) < 0);
      CHECK((errno == EACCES || errno == EROFS));
      CHECK(::truncate((control + name).c_str(), 0) != 0);
    }
    CHECK(read_file(control + "stats").has_value());
  }
  SECTION("ten thousand control files leave the daemon's memory where it was") {
    for (int i = 0; i < 1000; ++i) {
      REQUIRE(publish(mount, "#epoch 0\nf1\n", "o" + std::to_string(i)) == 0);
    }
    const double before = rss_kib(mount.pid());
    std::vector<cachestore::UniqueFd> open_files;
    for (int i = 0; i < 10000; ++i) {
      if (i % 2 == 0) {
        REQUIRE(publish(mount, "#epoch 0\nf1\n", "p" + std::to_string(i)) == 0);
      } else {
        open_files.emplace_back(
            ::open((control + "q" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0600));
        REQUIRE(open_files.back().valid());
        REQUIRE(::write(open_files.back().get(), "#epoch 0\nf2\n", 12) == 12);
      }
    }
    open_files.clear();
    const double after = rss_kib(mount.pid());
    WARN("daemon RSS " << before << " KiB before 10,000 control files, " << after << " KiB after");
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps freed memory in quarantine
    CHECK(after - before < 16 * 1024);
#endif
    CHECK(stat_of(mount, "prefetch.publishes") == 11001);
    CHECK(stat_of(mount, "prefetch.publish_failures") == 0);
  }
  CHECK(read_file(mount / "hello.txt") == "hello");
}

TEST_CASE("symlinks in the source never bring bytes from outside the root into the cache",
          "[mount][input]") {
  // docs/reliability.md I5: orders name symlinks out of the tree (to /etc/passwd, to /, relative
  // climbs, a chain that escapes after two hops, a loop) and, for a few seconds, entries that
  // are swapped between a regular file and a symlink out (a file and a directory on the path)
  // while prefetch and readers run. The source is opened beneath its root without following
  // links (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), so no byte from outside may reach
  // the cache; readlink through the mount gives each link's text unchanged.
  TempDir dir;
  const std::string sentinel = "OUTSIDE-THE-ROOT-5f3a9c\n";
  std::string secret;
  for (int i = 0; i < 2000; ++i) {
    secret += sentinel;
  }
  fs::create_directories(dir / "outside/sub");
  std::ofstream(dir / "outside/secret") << secret;
  std::ofstream(dir / "outside/sub/g") << secret;
  const std::string src = dir / "src";
  write_files(src, 20, 40000);
  fs::create_directories(src + "/deep/er");
  const std::string outside_rel = (dir / "outside/secret").substr(1);  // from "/"
  const std::vector<std::pair<std::string, std::string>> links = {
      {"to_passwd", "/etc/passwd"},
      {"to_secret", dir / "outside/secret"},
      {"to_root", "/"},
      {"to_outside", dir / "outside"},
      {"climb", "../outside/secret"},
      {"deep/er/climb", "../../../outside/secret"},
      {"deep/up", "../../../../../../../../../../.."},
      {"loop_a", "loop_b"},
      {"loop_b", "loop_a"},
      {"hop1", "hop2"},
      {"hop2", "deep/er/climb"},
      {"inside", "f0"},
  };
  for (const auto& [name, target] : links) {
    fs::create_symlink(target, src + "/" + name);
  }
  // The swapped entries: swap<k> and swapdir change places with their twins .alt<k> and
  // .altdir (renameat2 RENAME_EXCHANGE, so each name always exists): one of each pair is a
  // regular file (a directory holding g), the other a symlink out.
  constexpr int kSwaps = 16;
  for (int k = 0; k < kSwaps; ++k) {
    REQUIRE(
        tools::write_content_file(src + "/swap" + std::to_string(k), 100 + k, 1, 30000).is_ok());
    fs::create_symlink(dir / "outside/secret", src + "/.alt" + std::to_string(k));
  }
  fs::create_directories(src + "/swapdir");
  REQUIRE(tools::write_content_file(src + "/swapdir/g", 200, 1, 30000).is_ok());
  fs::create_directory_symlink(dir / "outside/sub", src + "/.altdir");

  Mount mount(src, dir / "mnt");
  // The files first, then the links: the links are ahead of the reader when it is done.
  std::string order;
  for (int i = 0; i < 20; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  order +=
      "to_passwd\nto_secret\nto_root/etc/passwd\nto_outside/secret\nto_outside/sub/g\n"
      "climb\ndeep/er/climb\ndeep/up/etc/passwd\ndeep/up/" +
      outside_rel + "\nloop_a\nhop1\ninside\n";
  REQUIRE(publish(mount, order) == 0);
  for (int i = 0; i < 20; ++i) {
    check_same(mount / ("f" + std::to_string(i)), src + "/f" + std::to_string(i));
  }
  wait_for_staging(mount);
  CHECK(stat_of(mount, "prefetch.streams.default.rejected_entries") >= 12);
  for (const auto& [name, target] : links) {
    CHECK(fs::read_symlink(mount / name) == target);
  }

  std::string swaps = "#epoch 0\n";
  for (int k = 0; k < kSwaps; ++k) {
    swaps += "swap" + std::to_string(k) + "\n";
  }
  swaps += "swapdir/g\n";
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> exchanges{0};
  std::thread swapper([&] {
    for (int round = 0; !stop; ++round) {
      const int k = round % (kSwaps + 1);
      const std::string a = k < kSwaps ? src + "/swap" + std::to_string(k) : src + "/swapdir";
      const std::string b = k < kSwaps ? src + "/.alt" + std::to_string(k) : src + "/.altdir";
      if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) {
        ++exchanges;
      }
    }
  });
  std::thread reader([&] {
    while (!stop) {
      for (int k = 0; k < kSwaps && !stop; ++k) {
        (void)read_file(mount / ("swap" + std::to_string(k)));
      }
      (void)read_file(mount / "swapdir/g");
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int published = 0;
  while (std::chrono::steady_clock::now() < until) {
    published += publish(mount, swaps) == 0 ? 1 : 0;  // the same epoch again: from its start
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  swapper.join();
  reader.join();
  wait_for_staging(mount);
  INFO(published << " orders published, " << exchanges << " exchanges");
  CHECK(published > 50);
  CHECK(exchanges > 1000);
  CHECK(stat_of(mount, "prefetch.prefetches") > 0);

  const auto passwd = read_file("/etc/passwd");
  REQUIRE(passwd.has_value());
  uint64_t copies = 0;
  for (const auto& e : fs::recursive_directory_iterator(mount.cache_root())) {
    if (!e.is_regular_file()) {
      continue;
    }
    const std::string bytes = read_file(e.path()).value_or("");
    INFO(e.path());
    CHECK(bytes.find(sentinel) == std::string::npos);
    CHECK(bytes != *passwd);
    ++copies;
  }
  CHECK(copies >= 20);
}

}  // namespace epochfs::test
