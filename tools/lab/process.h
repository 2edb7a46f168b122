// Child processes and mounts for the demo, benchmarks and tests: start a daemon, wait until
// its mount is up, and always tear it down (unmount, lazily as a fallback, kill if hung).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace epochfs::tools {

// Starts argv[0] (looked up in PATH if it has no slash) with argv. The child gets SIGTERM if this
// process dies, so a crashed test never leaves a daemon behind (its SIGTERM handler unmounts).
// Returns -1 on failure.
pid_t spawn(const std::vector<std::string>& argv);

// Exit code of pid (128+signal if killed), or nullopt if it did not exit within timeout.
std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout);

// True once a filesystem of type fstype is mounted at path (absolute); false if pid exited
// first or timeout passed.
bool wait_for_mount(const std::string& path, const std::string& fstype, pid_t pid,
                    std::chrono::milliseconds timeout);

// CPU seconds pid has used so far (user and system), or nullopt if it cannot be read.
std::optional<double> cpu_seconds(pid_t pid);

// Unmounts path and reaps pid: umount, then lazy umount, then SIGKILL after timeout.
// Returns pid's exit code (nullopt if it had to be killed).
std::optional<int> stop_mount(const std::string& path, pid_t pid,
                              std::chrono::milliseconds timeout);

// A daemon serving a mount: started by the constructor (argv, mounting fstype at mountpoint,
// which is created if missing), unmounted and reaped by the destructor (stop_mount).
class MountedDaemon {
 public:
  MountedDaemon(const std::vector<std::string>& argv, std::string mountpoint,
                const std::string& fstype, std::chrono::milliseconds timeout);
  ~MountedDaemon();
  MountedDaemon(const MountedDaemon&) = delete;
  MountedDaemon& operator=(const MountedDaemon&) = delete;

  // False if the mount did not come up (the daemon is gone then).
  bool up() const { return pid_ > 0; }

  pid_t pid() const { return pid_; }

  // Stops and continues the daemon (SIGSTOP, SIGCONT), for a benchmark that takes turns
  // between mounts: a paused daemon does no background work. Nothing may touch its mount
  // while it is paused. The destructor continues it before unmounting.
  void pause();
  void resume();

 private:
  std::string mountpoint_;
  std::chrono::milliseconds timeout_;
  pid_t pid_ = -1;
};

// The executable `name` in the running one's directory: the build puts the epochfs binary,
// the lab and the fixture filesystems side by side.
std::string sibling_binary(const std::string& name);

// `requested` (created if missing, made absolute), or if empty a new directory
// $TMPDIR/<prefix>-XXXXXX; "" on failure.
std::string make_work_dir(const std::string& requested, const std::string& prefix);

}  // namespace epochfs::tools
