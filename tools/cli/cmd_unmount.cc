// `epochfs unmount`: unmount, saying what to do when the mount is busy.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

// Removing a large cache directory takes a while; a daemon still busy after this long is
// left to finish on its own.
constexpr auto kDaemonExitWait = std::chrono::seconds(120);

// True while pid runs. An exited child its parent has not reaped yet (a zombie) has done
// everything it will do, so it counts as gone.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return false;
  }
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

void wait_for_daemon(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kDaemonExitWait;
  while (running(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      fprintf(stderr, "epochfs: unmounted; the daemon (pid %d) is still cleaning up\n", pid);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int cmd_unmount(const std::string& path, bool lazy) {
  const std::string mountpoint = absolute_path(path);
  auto type = mount_type_at(mountpoint);
  if (!type) {
    fprintf(stderr, "epochfs: %s is not mounted\n", mountpoint.c_str());
    return 1;
  }
  if (*type != "fuse.epochfs") {
    fprintf(stderr, "epochfs: %s is not an epochfs mount (%s)\n", mountpoint.c_str(),
            type->c_str());
    return 1;
  }
  // The daemon's pid, to wait for it: it removes its cache directory on the way out.
  auto stats = read_stats(mountpoint);
  auto pid = stats ? stats->number("pid") : std::nullopt;
  if (umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) == 0) {
    if (!lazy && pid) {
      wait_for_daemon(static_cast<pid_t>(*pid));
    }
    return 0;
  }
  const int err = errno;
  if (err == EBUSY) {
    fprintf(stderr,
            "epochfs: %s is busy (a process has a file or directory open there); close it, or "
            "detach now and finish when it closes: epochfs unmount --lazy %s\n",
            mountpoint.c_str(), mountpoint.c_str());
    return 1;
  }
  if (err == EPERM && geteuid() != 0) {
    // An unprivileged user's mount is undone by the setuid helper.
    execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", mountpoint.c_str(), nullptr);
  }
  fprintf(stderr, "epochfs: cannot unmount %s: %s\n", mountpoint.c_str(), strerror(err));
  return 1;
}

}  // namespace epochfs::tools
