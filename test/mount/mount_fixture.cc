#include "test/mount/mount_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/dataset.h"
#include "tools/lab/process.h"

namespace epochfs::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
  char tmpl[] = "/tmp/epochfs-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
  // Readable by other users: permission tests switch to an unprivileged user.
  chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  // Never descend into a mount that is still up: detach anything left first.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && is_mounted(it->path().string())) {
      umount2(it->path().c_str(), MNT_DETACH);
      it.disable_recursion_pending();
    }
  }
  // Restore modes the tests took away so removal can proceed.
  for (auto it = fs::recursive_directory_iterator(path_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_symlink(ec)) {
      chmod(it->path().c_str(), 0755);
    }
  }
  fs::remove_all(path_, ec);
}

Mount::Mount(const std::string& source, const std::string& mountpoint,
             const std::vector<std::string>& extra_args, const std::vector<std::string>& launcher)
    : mountpoint_(mountpoint) {
  fs::create_directories(mountpoint_);
  std::vector<std::string> argv = {EPOCHFS_BINARY, "mount", "--foreground", source, mountpoint};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  // The suite runs once per data path (test/CMakeLists.txt): the environment picks it.
  const char* data_path = getenv("EPOCHFS_TEST_DATA_PATH");
  if (data_path != nullptr && std::find(argv.begin(), argv.end(), "--data-path") == argv.end()) {
    argv.push_back("--data-path");
    argv.push_back(data_path);
  }
  // A manual rerun of the suite over FUSE over io_uring (fusefs/uring_transport.h).
  const char* transport = getenv("EPOCHFS_TEST_FUSE_TRANSPORT");
  if (transport != nullptr &&
      std::find(argv.begin(), argv.end(), "--fuse-transport") == argv.end()) {
    argv.push_back("--fuse-transport");
    argv.push_back(transport);
  }
  // Keep the cache inside the test's scratch space, not in the system default.
  if (std::find(argv.begin(), argv.end(), "--cache-dir") == argv.end()) {
    argv.push_back("--cache-dir");
    argv.push_back(mountpoint_ + ".cache");
  }
  argv.insert(argv.begin(), launcher.begin(), launcher.end());
  pid_ = tools::spawn(argv);
  REQUIRE(pid_ > 0);
  if (!tools::wait_for_mount(mountpoint_, "fuse.epochfs", pid_, kMountTimeout)) {
    tools::stop_mount(mountpoint_, pid_, kMountTimeout);
    reaped_ = true;
    FAIL("the mount at " << mountpoint_ << " did not come up");
  }
}

Mount::~Mount() {
  if (!reaped_) {
    tools::stop_mount(mountpoint_, pid_, kMountTimeout);
  }
}

namespace {

// What a daemon that outlived its unmount is doing, and which mounts remain at its mountpoint:
// the evidence for a rare case seen under ASan (the unmount succeeded, then every thread of
// the daemon waited on a futex inside libfuse's loop).
std::string daemon_report(pid_t pid, const std::string& mountpoint) {
  std::ostringstream out;
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    if (line.find(mountpoint) != std::string::npos) {
      out << "mount: " << line << "\n";
    }
  }
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(task_dir, ec)) {
    std::ifstream comm(task.path() / "comm");
    std::ifstream wchan(task.path() / "wchan");
    std::string name, waits;
    std::getline(comm, name);
    std::getline(wchan, waits);
    out << "thread " << task.path().filename().string() << " " << name << ": " << waits << "\n";
  }
  // Where each thread is in user space, when gdb is there to tell.
  if (::access("/usr/bin/gdb", X_OK) == 0) {
    const auto bt = run_command(
        {"/usr/bin/gdb", "-p", std::to_string(pid), "-batch", "-ex", "thread apply all bt 12"});
    out << bt.output.substr(0, 20000);
  }
  return out.str();
}

}  // namespace

std::optional<int> Mount::wait_exit() {
  auto code = tools::wait_exit(pid_, kMountTimeout);
  reaped_ = code.has_value();
  if (!code) {
    UNSCOPED_INFO("the daemon is still running:\n" << daemon_report(pid_, mountpoint_));
  }
  return code;
}

namespace {

std::vector<std::string> slowfs_argv(const std::string& source, const std::string& mountpoint,
                                     double latency_ms, unsigned max_inflight,
                                     const std::vector<std::string>& more) {
  std::vector<std::string> argv = {EPOCHFS_SLOWFS_BINARY,
                                   source,
                                   mountpoint,
                                   "--latency-ms",
                                   std::to_string(latency_ms),
                                   "--max-inflight",
                                   std::to_string(max_inflight)};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// A counter slowfs reports as an extended attribute (test/fixtures).
uint64_t counter_of(const std::string& path, const char* name) {
  char buf[32] = {};
  const ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof(buf) - 1);
  REQUIRE(n > 0);
  return std::stoull(std::string(buf, static_cast<size_t>(n)));
}

}  // namespace

SlowSource::SlowSource(const std::string& source, const std::string& mountpoint, double latency_ms,
                       unsigned max_inflight, const std::vector<std::string>& more)
    : mountpoint_(mountpoint),
      daemon_(slowfs_argv(source, mountpoint, latency_ms, max_inflight, more), mountpoint,
              "fuse.slowfs", kMountTimeout) {
  if (!daemon_.up()) {
    FAIL("the slow source at " << mountpoint << " did not come up");
  }
}

uint64_t SlowSource::opens(const std::string& rel_path) const {
  return counter_of(rel_path.empty() ? mountpoint_ : mountpoint_ + "/" + rel_path,
                    "user.slowfs.opens");
}

uint64_t SlowSource::most_reads() const {
  return counter_of(mountpoint_, "user.slowfs.most_reads");
}

FaultFs::FaultFs(const std::string& source, const std::string& mountpoint)
    : mountpoint_(mountpoint),
      daemon_({EPOCHFS_FAULTFS_BINARY, source, mountpoint}, mountpoint, "fuse.faultfs",
              kMountTimeout) {
  if (!daemon_.up()) {
    FAIL("faultfs at " << mountpoint << " did not come up");
  }
}

FaultFs::~FaultFs() {
  if (daemon_.up()) {
    // No checks here: a failed one would throw out of a destructor.
    ::setxattr(mountpoint_.c_str(), "user.faultfs.release", "", 0, 0);
    ::setxattr(mountpoint_.c_str(), "user.faultfs.rules", "", 0, 0);
  }
}

bool FaultFs::try_set_rules(const std::string& rules) {
  return ::setxattr(mountpoint_.c_str(), "user.faultfs.rules", rules.data(), rules.size(), 0) == 0;
}

void FaultFs::set_rules(const std::string& rules) { REQUIRE(try_set_rules(rules)); }

void FaultFs::release() {
  REQUIRE(::setxattr(mountpoint_.c_str(), "user.faultfs.release", "", 0, 0) == 0);
}

std::string FaultFs::stats() const {
  std::string buf(1 << 20, '\0');
  const ssize_t n = ::getxattr(mountpoint_.c_str(), "user.faultfs.stats", buf.data(), buf.size());
  REQUIRE(n >= 0);
  buf.resize(static_cast<size_t>(n));
  return buf;
}

uint64_t FaultFs::injected() const {
  const std::string json = stats();
  const std::string key = "\"injected\": ";
  return std::stoull(json.substr(json.find(key) + key.size()));
}

CommandResult run_epochfs(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {EPOCHFS_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

CommandResult run_lab(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {EPOCHFS_LAB_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

CommandResult run_command(const std::vector<std::string>& args) {
  int pipe_fds[2];
  REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  CommandResult result;
  char buf[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool is_mounted(const std::string& path) { return tools::mount_type_at(path).has_value(); }

std::optional<std::string> read_file(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return std::nullopt;
  }
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      return std::nullopt;
    }
    if (n == 0) {
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace epochfs::test

namespace epochfs::test {

ReadOnlyBind::ReadOnlyBind(const std::string& source, const std::string& target) : target_(target) {
  fs::create_directories(target_);
  REQUIRE(::mount(source.c_str(), target_.c_str(), nullptr, MS_BIND, nullptr) == 0);
  REQUIRE(::mount(nullptr, target_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) ==
          0);
}

ReadOnlyBind::~ReadOnlyBind() { tools::unmount_or_detach(target_); }

bool opens_reach_daemon() {
  const char* data_path = getenv("EPOCHFS_TEST_DATA_PATH");
  return data_path == nullptr || std::string(data_path) != "no-open";
}

int run_as_nobody(const std::function<int()>& fn) { return run_as(kNobody, fn); }

bool become_user(uid_t uid, const std::vector<gid_t>& groups) {
  return setgroups(groups.size(), groups.data()) == 0 && setresgid(uid, uid, uid) == 0 &&
         setresuid(uid, uid, uid) == 0;
}

int run_as(uid_t uid, const std::function<int()>& fn) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!become_user(uid)) {
      _exit(255);
    }
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

}  // namespace epochfs::test

namespace epochfs::test {

namespace {

// "prefetch.streams.<name>.<field>" names the one stream whose #stream is <name>: the document
// keys streams by user, job and name (docs/stats.md), which a test does not know in advance.
std::string resolve_stream_key(const tools::StatsDoc& doc, const std::string& key) {
  const std::string prefix = "prefetch.streams.";
  if (key.rfind(prefix, 0) != 0 || doc.values.count(key) != 0) {
    return key;
  }
  for (const auto& [path, value] : doc.values) {
    const std::string suffix = ".stream";
    if (path.rfind(prefix, 0) != 0 || path.size() <= suffix.size() ||
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string stream_key = path.substr(0, path.size() - suffix.size());
    const std::string wanted = prefix + value + ".";
    if (key.rfind(wanted, 0) == 0) {
      return stream_key + "." + key.substr(wanted.size());
    }
  }
  return key;
}

}  // namespace

std::optional<std::string> passthrough_missing() {
  if (getenv("EPOCHFS_TEST_DENY_PASSTHROUGH") != nullptr) {
    return "EPOCHFS_TEST_DENY_PASSTHROUGH is set: the daemon acts as on a kernel without it";
  }
  struct utsname u;
  int major = 0;
  int minor = 0;
  if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) {
    return std::string("the kernel's version is unknown");
  }
  if (major < 6 || (major == 6 && minor < 9)) {
    return "Linux " + std::string(u.release) + " has no FUSE passthrough (it came in 6.9)";
  }
  return std::nullopt;
}

int write_order(const Mount& mount, const std::string& text) {
  const std::string path = mount / ".epochfs/order";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno;
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int closed = ::close(fd);
  return !written ? EIO : closed != 0 ? errno : 0;
}

double stat_of(const Mount& mount, const std::string& key) {
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  auto v = doc->number(resolve_stream_key(*doc, key));
  INFO(key);
  REQUIRE(v.has_value());
  return *v;
}

int publish(const Mount& mount, const std::string& text, const std::string& name,
            std::vector<size_t> cuts) {
  const std::string path = mount / (".epochfs/" + name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno;
  }
  int err = 0;
  cuts.push_back(text.size());
  size_t from = 0;
  for (const size_t to : cuts) {
    if (err == 0 && to > from &&
        ::write(fd, text.data() + from, to - from) != static_cast<ssize_t>(to - from)) {
      err = errno;
    }
    from = std::max(from, to);
  }
  if (::close(fd) != 0 && err == 0) {
    err = errno;
  }
  return err;
}

void wait_for_staging(const Mount& mount) {
  // "Nothing queued" alone is also true before the planner's first pass after a publish. Idle:
  // no pass due or running, no copy queued or in flight, in two documents in a row that
  // started the same number of prefetches (none came and went between them).
  std::string why;
  const auto idle_at = [&](double* prefetches) {
    auto doc = tools::read_stats(mount.path());
    REQUIRE(doc.has_value());
    why = "planning " + doc->values["prefetch.planning"] + ", queued " +
          doc->values["cache.copies_queued"] + ", in flight " +
          doc->values["cache.copies_in_flight"];
    *prefetches = doc->number("prefetch.prefetches").value_or(-1);
    return doc->values["prefetch.planning"] == "false" && doc->number("cache.copies_queued") == 0 &&
           doc->number("cache.copies_in_flight") == 0;
  };
  bool idle = false;
  for (int i = 0; i < 1000 && !idle; ++i) {
    double before = 0;
    double after = 0;
    idle = idle_at(&before) && idle_at(&after) && before == after;
    if (!idle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  INFO(why);
  REQUIRE(idle);
}

double wait_for_stat(const Mount& mount, const std::string& key, double want, Until until) {
  const auto reached = [&](double v) { return until == Until::kRises ? v >= want : v <= want; };
  double v = stat_of(mount, key);
  for (int i = 0; i < 1000 && !reached(v); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    v = stat_of(mount, key);
  }
  return v;
}

void write_files(const std::string& root, int count, uint64_t size, uint32_t version) {
  std::filesystem::create_directories(root);
  for (int i = 0; i < count; ++i) {
    REQUIRE(tools::write_content_file(root + "/f" + std::to_string(i), i, version, size).is_ok());
  }
}

double rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6));
    }
  }
  return -1;
}

void check_same(const std::string& a, const std::string& b) {
  INFO(a);
  auto x = tools::file_digest(a);
  auto y = tools::file_digest(b);
  REQUIRE(x.is_ok());
  REQUIRE(y.is_ok());
  CHECK(x.value() == y.value());
}

void check_files(const std::string& a_root, const std::string& b_root, int count) {
  for (int i = 0; i < count; ++i) {
    const std::string name = "/f" + std::to_string(i);
    check_same(a_root + name, b_root + name);
  }
}

void make_small_source(const std::string& src) {
  std::filesystem::create_directories(src);
  std::ofstream(src + "/hello.txt") << "hello";
}

Tmpfs::Tmpfs(const std::string& path, const std::string& options, unsigned long flags)
    : path_(path) {
  std::filesystem::create_directories(path);
  REQUIRE(::mount("tmpfs", path.c_str(), "tmpfs", flags, options.c_str()) == 0);
}

Tmpfs::~Tmpfs() { tools::unmount_or_detach(path_); }

}  // namespace epochfs::test
