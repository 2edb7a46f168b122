#include "cachestore/root_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <vector>

namespace epochfs::cachestore {
namespace {

// glibc 2.36 has no openat2() wrapper.
int sys_openat2(int dirfd, const char* path, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags) | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
    // EAGAIN: a concurrent rename inside the tree raced the RESOLVE_BENEATH check; retry.
  } while (fd < 0 && (errno == EAGAIN || errno == EINTR));
  return fd;
}

const char* relative_or_dot(const std::string& rel) { return rel.empty() ? "." : rel.c_str(); }

// /proc/self/fd/N names the object an O_PATH fd refers to, for calls that take only a path.
std::string proc_fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

Result<struct stat> fstat_fd(int fd, const std::string& context) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::error(errno, "fstat " + context);
  }
  return st;
}

Result<RootDir> RootDir::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Status::error(errno, path);
  }
  return RootDir(path, UniqueFd(fd));
}

RootDir::RootDir(std::string path, UniqueFd fd) : path_(std::move(path)), fds_(new Fds) {
  fds_->current.store(fd.get());

  struct stat st {};

  ::fstat(fd.get(), &st);
  fds_->first_dev = st.st_dev;

  struct statfs fs {};

  ::fstatfs(fd.get(), &fs);
  fds_->first_type = static_cast<long>(fs.f_type);
  fds_->current_dev.store(st.st_dev);
  MutexLock lock(fds_->mu);
  fds_->all.push_back(std::move(fd));
}

bool RootDir::reopen() const {
  if (reopens() >= kMaxReopens) {
    return false;
  }
  // Outside the lock: the path may lead into a hung mount.
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st;

  struct statfs fs {};

  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || ::fstatfs(fd.get(), &fs) != 0) {
    return false;  // still the dead mount, or nothing there yet
  }
  if (static_cast<long>(fs.f_type) != fds_->first_type) {
    return false;  // the directory under the mount point: the new mount is not there yet
  }
  MutexLock lock(fds_->mu);
  fds_->current_dev.store(st.st_dev);
  fds_->current.store(fd.get(), std::memory_order_release);
  fds_->all.push_back(std::move(fd));
  return true;
}

unsigned RootDir::reopens() const {
  MutexLock lock(fds_->mu);
  return static_cast<unsigned>(fds_->all.size() - 1);
}

Result<UniqueFd> RootDir::open_at(const std::string& rel, int flags) const {
  const int fd = sys_openat2(root_fd(), relative_or_dot(rel), flags);
  if (fd < 0) {
    return Status::error(errno, "open " + rel);
  }
  return UniqueFd(fd);
}

Result<UniqueFd> RootDir::open_path_only(const std::string& rel) const {
  return open_at(rel, O_PATH);
}

Result<struct stat> RootDir::stat_at(const std::string& rel) const {
  auto fd = open_path_only(rel);
  if (!fd.is_ok()) {
    return fd.status();
  }
  return stat_fd(fd.value().get(), rel);
}

Result<struct stat> RootDir::stat_fd(int fd, const std::string& context) const {
  auto st = fstat_fd(fd, context);
  if (st.is_ok()) {
    normalize(st.value());
  }
  return st;
}

void RootDir::normalize(struct stat& st) const {
  const dev_t current = fds_->current_dev.load();
  if (st.st_dev == current && current != fds_->first_dev) {
    st.st_dev = fds_->first_dev;
  }
}

Result<std::string> RootDir::readlink_at(const std::string& rel) const {
  auto fd = open_path_only(rel);
  if (!fd.is_ok()) {
    return fd.status();
  }
  std::vector<char> buf(PATH_MAX);
  const ssize_t n = ::readlinkat(fd.value().get(), "", buf.data(), buf.size());
  if (n < 0) {
    // readlinkat(fd, "") says ENOENT for a non-symlink; readlink(2) on a path says EINVAL.
    return Status::error(errno == ENOENT ? EINVAL : errno, "readlink " + rel);
  }
  return std::string(buf.data(), static_cast<size_t>(n));
}

Result<struct statvfs> RootDir::statfs() const {
  struct statvfs st;
  if (::fstatvfs(root_fd(), &st) != 0) {
    return Status::error(errno, "statvfs " + path_);
  }
  return st;
}

Result<long> RootDir::fs_type() const {
  struct statfs st {};

  if (::fstatfs(root_fd(), &st) != 0) {
    return Status::error(errno, "statfs " + path_);
  }
  return static_cast<long>(st.f_type);
}

Status RootDir::access_at(const std::string& rel, int mask, bool effective) const {
  auto fd = open_path_only(rel);
  if (!fd.is_ok()) {
    return fd.status();
  }
  // faccessat2 checks the object an O_PATH fd names (AT_EMPTY_PATH, Linux 5.8).
  const int flags = AT_EMPTY_PATH | (effective ? AT_EACCESS : 0);
  if (syscall(SYS_faccessat2, fd.value().get(), "", mask, flags) != 0) {
    return Status::error(errno, "access " + rel);
  }
  return Status::ok();
}

Result<size_t> RootDir::getxattr_at(const std::string& rel, const char* name, char* buf,
                                    size_t size) const {
  auto fd = open_path_only(rel);
  if (!fd.is_ok()) {
    return fd.status();
  }
  const ssize_t n = ::getxattr(proc_fd_path(fd.value().get()).c_str(), name, buf, size);
  if (n < 0) {
    return Status::error(errno, "getxattr " + rel);
  }
  return static_cast<size_t>(n);
}

Result<size_t> RootDir::listxattr_at(const std::string& rel, char* buf, size_t size) const {
  auto fd = open_path_only(rel);
  if (!fd.is_ok()) {
    return fd.status();
  }
  const ssize_t n = ::listxattr(proc_fd_path(fd.value().get()).c_str(), buf, size);
  if (n < 0) {
    return Status::error(errno, "listxattr " + rel);
  }
  return static_cast<size_t>(n);
}

Result<size_t> pread_full(int fd, char* buf, size_t size, off_t off, const std::string& context) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, buf + got, size - got, off + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return Status::error(errno, "read " + context);
    }
    if (n == 0) {
      break;  // the end of the file
    }
    got += static_cast<size_t>(n);
  }
  return got;
}

Status write_all(int fd, std::string_view data, const std::string& context) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return Status::error(errno, "write " + context);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::ok();
}

}  // namespace epochfs::cachestore
