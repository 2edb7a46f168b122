#include "tools/cli/mount_table.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "cachestore/mount_info.h"

namespace epochfs::tools {

std::optional<std::string> mount_type_at(const std::string& path) {
  auto entry = cachestore::mount_at(path);
  return entry ? std::optional<std::string>(entry->type) : std::nullopt;
}

std::optional<unsigned> fuse_connection_at(const std::string& path) {
  auto entry = cachestore::mount_at(path);
  if (!entry || entry->type.rfind("fuse", 0) != 0 || entry->devno.rfind("0:", 0) != 0) {
    return std::nullopt;
  }
  return static_cast<unsigned>(std::stoul(entry->devno.substr(2)));
}

bool abort_fuse_connection(unsigned connection) {
  const std::string dir = "/sys/fs/fuse/connections";
  struct stat st;
  if (::stat((dir + "/" + std::to_string(connection)).c_str(), &st) != 0) {
    // fusectl is not mounted yet.
    ::mount("fusectl", dir.c_str(), "fusectl", 0, nullptr);
  }
  std::ofstream abort(dir + "/" + std::to_string(connection) + "/abort");
  abort << "1";
  abort.flush();
  return static_cast<bool>(abort);
}

std::string absolute_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') {
    p.pop_back();
  }
  const size_t slash = p.rfind('/');
  std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  char buf[PATH_MAX];
  if (realpath(parent.c_str(), buf) == nullptr) {
    return p;
  }
  std::string out = buf;
  if (name.empty() || name == ".") {
    return out;
  }
  if (name == "..") {
    return realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
  }
  return out == "/" ? "/" + name : out + "/" + name;
}

bool is_dead_mount(const std::string& path) {
  struct statfs st;
  return ::statfs(path.c_str(), &st) != 0 && errno == ENOTCONN;
}

void unmount_or_detach(const std::string& path) {
  if (umount2(path.c_str(), 0) != 0) {
    umount2(path.c_str(), MNT_DETACH);
  }
}

bool detach_mount(const std::string& path) {
  if (umount2(path.c_str(), MNT_DETACH) == 0) {
    return true;
  }
  if (errno != EPERM || geteuid() == 0) {
    return false;
  }
  // An unprivileged user's mount is undone by the setuid helper.
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("fusermount3", "fusermount3", "-uz", path.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    errno = EPERM;
    return false;
  }
  return true;
}

}  // namespace epochfs::tools
