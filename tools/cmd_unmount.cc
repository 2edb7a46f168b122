// `epochfs unmount`: unmount, saying what to do when the mount is busy.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/mount_table.h"

namespace epochfs::tools {

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
  if (umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) == 0) {
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
