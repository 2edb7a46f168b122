// Running epochfs on a node: mounting from /etc/fstab (the mount helper conventions),
// `epochfs doctor`, the log file, and the operator recipes shipped in tools/deploy/.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

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
  Tmpfs small(dir / "small", "size=1M,mode=0700");
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

TEST_CASE("doctor says when another user could change the cache dir", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "cache");
  fs::create_directories(dir / "mnt");
  SECTION("the cache dir is another user's") {
    REQUIRE(::chown((dir / "cache").c_str(), 65534, 65534) == 0);
    const CommandResult r = run_epochfs({"doctor", dir / "src", "--cache-dir", dir / "cache"});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, "PROBLEM  cache dir " + dir / "cache" + ": cache root " +
                                 dir / "cache" + " is owned by uid 65534"));
    // The mount refuses it with the same words.
    const CommandResult m =
        run_epochfs({"mount", dir / "src", dir / "mnt", "--cache-dir", dir / "cache"});
    INFO(m.output);
    CHECK(m.exit_code == 1);
    CHECK(contains(m.output, "cache root " + dir / "cache" + " is owned by uid 65534"));
  }
  SECTION("it is not made yet, below a directory all can write") {
    REQUIRE(::chmod((dir / "cache").c_str(), 0777) == 0);
    const CommandResult r =
        run_epochfs({"doctor", dir / "src", "--cache-dir", dir / "cache/epochfs"});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.output, dir / "cache" + ", above the cache root " + dir / "cache/epochfs"));
  }
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
  const CommandResult stats = run_epochfs({"stats", mount.path()});
  CHECK(stats.exit_code == 1);
  CHECK(contains(stats.output, "is a stale mount: its daemon died"));
  // The kernel may still hold the root's attributes (doctor looked at it a moment ago): the next
  // mount still sees the mount is dead, and takes its place.
  DetachAtEnd guard(mount.path());
  CHECK(run_epochfs({"mount", dir / "src", mount.path(), "--no-cache"}).exit_code == 0);
  CHECK(read_file(mount / "hello.txt") == "hello");
  CHECK(run_epochfs({"unmount", mount.path()}).exit_code == 0);
  // Unmounted, the mountpoint is an empty directory: not taken for a source with no problem.
  const CommandResult unmounted = run_epochfs({"doctor", mount.path(), "--no-cache"});
  INFO(unmounted.output);
  CHECK(unmounted.exit_code == 1);
  CHECK(contains(unmounted.output, "is an empty directory: nothing is mounted there"));
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

namespace {

// The operator recipes (tools/deploy/) are mounted as shipped, with only their paths pointed
// into the test's directory.
std::string deploy_file(const std::string& name) {
  return std::string(EPOCHFS_SOURCE_DIR) + "/tools/deploy/" + name;
}

// What mount(8) is handed for an fstab line or a mount unit.
struct MountSpec {
  std::string source;
  std::string target;
  std::string type;
  std::string options;
};

std::vector<std::string> split_options(const std::string& options) {
  std::vector<std::string> out;
  std::stringstream in(options);
  for (std::string opt; std::getline(in, opt, ',');) {
    out.push_back(opt);
  }
  return out;
}

bool has_option(const std::string& options, const std::string& name) {
  for (const std::string& opt : split_options(options)) {
    if (opt == name) {
      return true;
    }
  }
  return false;
}

// The one entry of an fstab file (lines other than blanks and comments; a failed check if there
// is not exactly one): its first four fields.
MountSpec fstab_entry(const std::string& text) {
  std::vector<MountSpec> entries;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::stringstream fields(line);
    MountSpec e;
    if (!(fields >> e.source) || e.source[0] == '#') {
      continue;
    }
    fields >> e.target >> e.type >> e.options;
    entries.push_back(e);
  }
  REQUIRE(entries.size() == 1);
  return entries[0];
}

// What=, Where=, Type= and Options= of a mount unit's [Mount] section.
MountSpec unit_entry(const std::string& text) {
  MountSpec e;
  std::string section;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line[0] == ';') {
      continue;
    }
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const size_t eq = line.find('=');
    if (section != "[Mount]" || eq == std::string::npos) {
      continue;
    }
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (key == "What") {
      e.source = value;
    } else if (key == "Where") {
      e.target = value;
    } else if (key == "Type") {
      e.type = value;
    } else if (key == "Options") {
      e.options = value;
    }
  }
  return e;
}

// spec with its source and target in dir, and cache_dir and metrics_file too; every other option
// as shipped.
MountSpec in_test_dir(MountSpec spec, const TempDir& dir) {
  spec.source = dir / "src";
  spec.target = dir / "mnt";
  std::string options;
  for (std::string opt : split_options(spec.options)) {
    if (opt.rfind("cache_dir=", 0) == 0) {
      opt = "cache_dir=" + dir / "cache";
    } else if (opt.rfind("metrics_file=", 0) == 0) {
      opt = "metrics_file=" + dir / "epochfs.prom";
    }
    options += (options.empty() ? "" : ",") + opt;
  }
  spec.options = options;
  return spec;
}

// Mounts spec as `mount -t TYPE -o OPTIONS SOURCE TARGET` does, which is what mount(8) runs for
// an fstab line and systemd for a mount unit: for a fuse.* type it runs fuse3's helper
// (/sbin/mount.fuse, a link to mount.fuse3), which runs `epochfs` from PATH. mount(8) itself
// clears PATH for its helpers, so it would find only an epochfs installed on the machine; the
// test runs the helper with the build's binary first in PATH, as the fstab test above does.
CommandResult mount_like_mount8(const MountSpec& spec) {
  return run_command({"env", "PATH=" + binary_dir() + ":/usr/sbin:/usr/bin:/sbin:/bin",
                      "mount.fuse3", spec.source, spec.target, "-t", spec.type, "-o",
                      spec.options});
}

// The superblock options the kernel lists for the mount at path (/proc/self/mountinfo, after
// "- TYPE SOURCE"): for FUSE, allow_other and default_permissions among them.
std::string super_options_at(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::stringstream fields(line);
    std::string id, parent, dev, root, mountpoint;
    fields >> id >> parent >> dev >> root >> mountpoint;
    const size_t dash = line.find(" - ");
    if (mountpoint != path || dash == std::string::npos) {
      continue;
    }
    std::stringstream rest(line.substr(dash + 3));
    std::string type, source, options;
    rest >> type >> source >> options;
    return options;
  }
  return "";
}

// Mounts spec from test_dir (made by the caller with files f0..f2 in src), checks what a shared
// node needs of it, and leaves it mounted.
void check_shared_mount(const MountSpec& spec, const TempDir& dir) {
  INFO("mount -t " << spec.type << " -o " << spec.options << " " << spec.source << " "
                   << spec.target);
  const CommandResult mounted = mount_like_mount8(spec);
  INFO(mounted.output);
  REQUIRE(mounted.exit_code == 0);
  REQUIRE(is_mounted(dir / "mnt"));
  const std::string super = super_options_at(dir / "mnt");
  INFO("superblock options: " << super);
  CHECK(has_option(super, "allow_other"));
  CHECK(has_option(super, "default_permissions"));
  check_files(dir / "src", dir / "mnt", 3);
  // allow_other at work: another user reads the same bytes and may publish (.epochfs is 1777).
  const std::string expected = read_all(dir / "src/f1");
  CHECK(run_as_nobody([&] { return read_file(dir / "mnt/f1") == expected ? 0 : 1; }) == 0);
  CHECK(contains(read_all(dir / "mnt/.epochfs/stats"), "\"dir\": \"" + dir / "cache/"));
}

}  // namespace

TEST_CASE("the shipped fstab line mounts a node's shared mount", "[mount][system]") {
  const std::optional<std::string> text = read_file(deploy_file("epochfs.fstab"));
  REQUIRE(text.has_value());
  const MountSpec shipped = fstab_entry(*text);
  INFO(shipped.options);
  CHECK(shipped.type == "fuse.epochfs");
  for (const char* opt : {"allow_other", "_netdev", "nofail"}) {
    CHECK(has_option(shipped.options, opt));
  }
  CHECK(contains(shipped.options, "cache_size="));
  TempDir dir;
  write_files(dir / "src", 3, 100000);
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  const MountSpec spec = in_test_dir(shipped, dir);
  // The test's paths replaced exactly the shipped ones.
  CHECK(contains(spec.options, "cache_dir=" + dir / "cache"));
  CHECK(contains(spec.options, "metrics_file=" + dir / "epochfs.prom"));
  check_shared_mount(spec, dir);
  CHECK(contains(read_all(dir / "epochfs.prom"), "epochfs_opens_total"));
  CHECK(run_epochfs({"unmount", dir / "mnt"}).exit_code == 0);
  CHECK_FALSE(is_mounted(dir / "mnt"));
  // The daemon has exited: it removed its cache directory and its metrics file.
  CHECK(fs::is_empty(dir / "cache"));
  CHECK_FALSE(fs::exists(dir / "epochfs.prom"));
}

TEST_CASE("the shipped systemd mount unit mounts the same mount", "[mount][system]") {
  const std::string unit = deploy_file("mnt-dataset.mount");
  const std::optional<std::string> text = read_file(unit);
  REQUIRE(text.has_value());
  const MountSpec shipped = unit_entry(*text);
  INFO(shipped.options);
  CHECK(shipped.type == "fuse.epochfs");
  CHECK(has_option(shipped.options, "allow_other"));
  // The same mount as the fstab line; nofail is fstab's word for the unit's WantedBy=.
  const MountSpec line = fstab_entry(read_file(deploy_file("epochfs.fstab")).value_or(""));
  CHECK(shipped.source == line.source);
  CHECK(shipped.target == line.target);
  CHECK(shipped.options + ",nofail" == line.options);
  // systemd does not run on the build machine, but systemd-analyze reads the unit as systemd
  // would: its keys, and its file name against Where=.
  const CommandResult verified = run_command({"systemd-analyze", "verify", unit});
  INFO(verified.output);
  CHECK(verified.exit_code == 0);
  TempDir dir;
  write_files(dir / "src", 3, 100000);
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  // Starting the unit: systemd runs mount(8) with What, Where, Type and Options.
  check_shared_mount(in_test_dir(shipped, dir), dir);
  // Stopping it: systemd runs umount(8), which does not wait for the daemon; the daemon then
  // lets its copies finish and removes its cache directory.
  const CommandResult stopped = run_command({"umount", dir / "mnt"});
  INFO(stopped.output);
  CHECK(stopped.exit_code == 0);
  CHECK_FALSE(is_mounted(dir / "mnt"));
  for (int i = 0; i < 600 && !fs::is_empty(dir / "cache"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(fs::is_empty(dir / "cache"));
}

TEST_CASE("the shipped Slurm prolog passes a served mount and fails a dead one",
          "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt", {"--allow-other"});
  const auto prolog = [&] {
    return run_command({"env", "-i", "EPOCHFS_MOUNT=" + mount.path(),
                        "PATH=" + binary_dir() + ":/usr/sbin:/usr/bin:/sbin:/bin",
                        deploy_file("slurm-prolog.sh")});
  };
  const CommandResult served = prolog();
  INFO(served.output);
  CHECK(served.exit_code == 0);
  CHECK(served.output.empty());
  REQUIRE(kill(mount.pid(), SIGKILL) == 0);
  mount.wait_exit();
  // A dead mount: doctor says why, the prolog detaches it and tries `mount MNT`, which fails
  // here (no fstab line), so the prolog fails and Slurm would drain the node.
  const CommandResult dead = prolog();
  INFO(dead.output);
  CHECK(dead.exit_code == 1);
  CHECK(contains(dead.output, "epochfs prolog: " + mount.path() + " is not served"));
  CHECK(contains(dead.output, "is a stale mount: its daemon died"));
  CHECK(contains(dead.output, "epochfs prolog: " + mount.path() + " is still not served"));
  CHECK_FALSE(is_mounted(mount.path()));
}

TEST_CASE("the shipped Slurm epilog removes a dead mount's cache and no live one's",
          "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt", {"--cache-dir", dir / "cache"});
  REQUIRE(read_file(mount / "hello.txt") == "hello");
  const auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir / "cache")) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  const std::vector<std::string> live = entries();
  REQUIRE(live.size() == 1);
  const auto epilog = [&] {
    return run_command({"env", "-i", "EPOCHFS_CACHE_DIR=" + dir / "cache",
                        "PATH=" + binary_dir() + ":/usr/sbin:/usr/bin:/sbin:/bin",
                        deploy_file("slurm-epilog.sh")});
  };
  CommandResult r = epilog();
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(entries() == live);
  REQUIRE(kill(mount.pid(), SIGKILL) == 0);
  mount.wait_exit();
  r = epilog();
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(fs::is_empty(dir / "cache"));
}

TEST_CASE("the man page and the completion list every command and option", "[mount][system]") {
  const CommandResult man = run_epochfs({"--man"});
  CHECK(man.exit_code == 0);
  CHECK(man.output.rfind(".TH EPOCHFS 1", 0) == 0);
  for (const char* section : {"epochfs mount SOURCE MOUNTPOINT", "epochfs unmount MOUNTPOINT",
                              "epochfs stats", "epochfs publish", "epochfs doctor"}) {
    CHECK(contains(man.output, ".SS \"" + std::string(section)));
  }
  CHECK(contains(man.output, ".BI \"\\-\\-cache\\-dir \" TEXT"));
  CHECK(contains(man.output, "\\-\\-outage\\-wait"));
  // The lab's commands are epochfs-lab's, never the shipped binary's.
  CHECK_FALSE(contains(man.output, "epochfs bench"));
  CHECK_FALSE(contains(man.output, "epochfs demo"));
  // The completion script, as bash runs it for `epochfs mount --cache-d<TAB>`.
  TempDir dir;
  const CommandResult script = run_epochfs({"--bash-completion"});
  REQUIRE(script.exit_code == 0);
  { std::ofstream(dir / "completion.bash") << script.output; }
  const auto complete = [&](const std::string& words, int cword) {
    return run_command({"bash", "-c",
                        "source " + dir / "completion.bash" + "; COMP_WORDS=(" + words +
                            "); COMP_CWORD=" + std::to_string(cword) +
                            "; _epochfs; echo \"${COMPREPLY[*]}\""})
        .output;
  };
  CHECK(complete("epochfs mount --cache-d", 2) == "--cache-dir\n");
  CHECK(complete("epochfs sta", 1) == "stats\n");
  CHECK(complete("epochfs unmount --l", 2) == "--lazy\n");
}

// Usage errors are one line in the project's words, naming the command and its help, with exit
// code 2; CLI11's own words ("Check bogus value in {auto->0,...} FAILED") and codes (105-109)
// never show.
TEST_CASE("the CLI explains a usage error and exits 2", "[mount][system]") {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"mount", "/src", "/mnt", "--data-path", "bogus"},
       "epochfs mount: --data-path: 'bogus' is not one of auto, classic, passthrough, no-open; "
       "see epochfs mount --help"},
      {{"mount", "/src", "/mnt", "--cache-sise", "1G"},
       "epochfs mount: unknown option '--cache-sise' (did you mean '--cache-size'?)"},
      {{"mount", "/src", "/mnt", "--log-level", "loud"}, "'loud' is not one of error, warning"},
      {{"mount", "/src", "/mnt", "--bogus-flag"}, "unknown option '--bogus-flag'; see"},
      {{"mount", "/src", "/mnt", "--cache-size", "lots"}, "--cache-size lots: expected a size"},
      {{"mount", "/src", "/mnt", "--cache-size", "10G", "--no-cache"},
       "epochfs mount: --no-cache contradicts --cache-size 10G: drop one"},
      {{"mount", "/src", "/mnt", "--no-cache", "--keep-cache"}, "contradicts --keep-cache"},
      {{"publish"}, "epochfs publish: mountpoint is required; see epochfs publish --help"},
      {{"publish", "/mnt", "a", "b"}, "epochfs publish: unexpected argument 'b'"},
  };

  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    const CommandResult r = run_epochfs(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, c.says));
    CHECK_FALSE(contains(r.output, "Run with --help"));
  }
}

TEST_CASE("a cache size beyond the cache disk mounts with a warning", "[mount][system]") {
  TempDir dir;
  make_small_source(dir / "src");
  fs::create_directories(dir / "mnt");
  DetachAtEnd guard(dir / "mnt");
  const CommandResult r = run_epochfs(
      {"mount", dir / "src", dir / "mnt", "--cache-dir", dir / "cache", "--cache-size", "9000T"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.output, "epochfs: warning: --cache-size 9000.0 TiB is more than "));
  CHECK(contains(r.output, "the reserve will bound the cache"));
  CHECK(read_file(dir / "mnt/hello.txt") == "hello");
  CHECK(run_epochfs({"unmount", dir / "mnt"}).exit_code == 0);
}

TEST_CASE("the CLI tells its version and answers a mistyped command as one", "[mount][system]") {
  const CommandResult version = run_epochfs({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(contains(version.output, std::string("epochfs ") + EPOCHFS_VERSION));
  const CommandResult typo = run_epochfs({"stat", "/nonexistent-mount"});
  CHECK(typo.exit_code == 2);
  CHECK(contains(typo.output, "unknown command 'stat' (did you mean 'stats'?)"));
  const CommandResult help = run_epochfs({"mount", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.output, "--data-path auto|classic|passthrough|no-open"));
  // The running daemon says its version too: in the stats and as a metric.
  TempDir dir;
  make_small_source(dir / "src");
  Mount mount(dir / "src", dir / "mnt");
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  CHECK(doc->values["version"] == EPOCHFS_VERSION);
  CHECK(contains(read_file(mount / ".epochfs/metrics").value_or(""),
                 ",version=\"" + std::string(EPOCHFS_VERSION) + "\"} 1"));
  CHECK(contains(read_file(mount / ".epochfs/metrics").value_or(""), "epochfs_build_info{"));
}

}  // namespace epochfs::test
