#include "tools/lab/process.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cachestore/proc_stat.h"
#include "tools/cli/mount_table.h"

namespace epochfs::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(10);

int decode_wait_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) {
      _exit(127);  // the parent died before prctl took effect
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

std::optional<double> cpu_seconds(pid_t pid) {
  using cachestore::ProcStat;
  const auto st = ProcStat::of(pid);
  const auto user = st ? st->number(ProcStat::kUserTime) : std::nullopt;
  const auto system = st ? st->number(ProcStat::kSystemTime) : std::nullopt;
  if (!user || !system) {
    return std::nullopt;
  }
  return static_cast<double>(*user + *system) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      return decode_wait_status(status);
    }
    if (r < 0 && errno != EINTR) {
      return std::nullopt;
    }
    if (Clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

bool wait_for_mount(const std::string& path, const std::string& fstype, pid_t pid,
                    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (mount_type_at(path) == fstype) {
      return true;
    }
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == pid) {
      return false;
    }
    std::this_thread::sleep_for(kPoll);
  }
  return false;
}

std::optional<int> stop_mount(const std::string& path, pid_t pid,
                              std::chrono::milliseconds timeout) {
  // Known before the unmount: afterwards the path no longer leads to the connection.
  const auto connection = fuse_connection_at(path);
  if (mount_type_at(path)) {
    unmount_or_detach(path);
  }
  if (pid <= 0) {
    return std::nullopt;
  }
  auto code = wait_exit(pid, timeout);
  if (!code) {
    // A daemon stuck on a request may not even die of SIGKILL until its connection ends.
    if (connection) {
      abort_fuse_connection(*connection);
    }
    kill(pid, SIGKILL);
    wait_exit(pid, timeout);
    if (mount_type_at(path)) {
      umount2(path.c_str(), MNT_DETACH);
    }
  }
  return code;
}

std::string sibling_binary(const std::string& name) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  const std::string self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  return (std::filesystem::path(self).parent_path() / name).string();
}

MountedDaemon::MountedDaemon(const std::vector<std::string>& argv, std::string mountpoint,
                             const std::string& fstype, std::chrono::milliseconds timeout)
    : mountpoint_(std::move(mountpoint)), timeout_(timeout) {
  std::error_code ec;
  std::filesystem::create_directories(mountpoint_, ec);
  pid_ = spawn(argv);
  if (pid_ > 0 && !wait_for_mount(mountpoint_, fstype, pid_, timeout_)) {
    stop_mount(mountpoint_, pid_, timeout_);
    pid_ = -1;
  }
}

MountedDaemon::~MountedDaemon() {
  if (pid_ > 0) {
    resume();
    stop_mount(mountpoint_, pid_, timeout_);
  }
}

void MountedDaemon::pause() {
  if (pid_ > 0) {
    kill(pid_, SIGSTOP);
  }
}

void MountedDaemon::resume() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
  }
}

std::string make_work_dir(const std::string& requested, const std::string& prefix) {
  std::error_code ec;
  if (!requested.empty()) {
    std::filesystem::create_directories(requested, ec);
    return ec ? std::string() : std::filesystem::absolute(requested).string();
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  return mkdtemp(pattern.data()) == nullptr ? std::string() : pattern;
}

}  // namespace epochfs::tools
