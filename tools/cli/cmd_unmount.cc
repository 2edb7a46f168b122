// `epochfs unmount`: unmount, saying what to do when the mount is busy.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cachestore/proc_stat.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/progress.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

// A daemon still busy after this long is left to finish on its own.
constexpr auto kDaemonExitWait = std::chrono::seconds(120);
// Removing a large cache directory takes minutes (a million copies): after this long, the
// daemon having given its directory up (renamed it away to remove it) is enough.
constexpr auto kQuickExit = std::chrono::seconds(2);

// True while pid runs. An exited child its parent has not reaped yet (a zombie) has done
// everything it will do, so it counts as gone.
bool running(pid_t pid) {
  const auto st = cachestore::ProcStat::of(pid);
  return st && !st->exited();
}

// Waits for the daemon to exit, or, kQuickExit past start, for its cache directory (empty:
// none) to be gone from its name.
void wait_for_daemon(pid_t pid, const std::string& cache_dir,
                     std::chrono::steady_clock::time_point start) {
  Progress progress;
  while (running(pid)) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= std::chrono::seconds(1)) {
      char line[160];
      snprintf(line, sizeof(line), "unmounted; the daemon (pid %d) is letting go of %s: %.0f s",
               pid, cache_dir.empty() ? "the mount" : "its cache",
               std::chrono::duration<double>(waited).count());
      progress.show(line);
    }
    if (waited >= kQuickExit && !cache_dir.empty() && ::access(cache_dir.c_str(), F_OK) != 0 &&
        errno == ENOENT) {
      progress.clear();
      fprintf(stderr, "epochfs: unmounted; the daemon (pid %d) goes on removing its cache\n", pid);
      return;
    }
    if (waited >= kDaemonExitWait) {
      progress.clear();
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
  const std::string cache_dir = stats ? stats->values["cache.dir"] : std::string();
  // From before the unmount: the kernel's part (evicting every inode it holds) is most of it
  // for a large tree.
  const auto start = std::chrono::steady_clock::now();
  if (umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) == 0) {
    if (!lazy && pid) {
      wait_for_daemon(static_cast<pid_t>(*pid), cache_dir, start);
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
