// RootDir: a directory tree read without ever leaving it.
//
// Every access goes through openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS relative to
// one directory fd opened at startup. So a path can neither climb out with "..", nor pass
// through a symlink (even one swapped in after we looked the path up), nor reach a magic link
// in /proc. Symlinks are objects we stat and readlink, never follow: the kernel resolves them
// on the client's side of the mount, where the target names a path in the mount itself.
//
// Holds one fd (the root) for its lifetime; every other fd it opens is returned to the caller,
// so the number of open fds never grows with the number of files (the open-files limit is a
// hard 20,000 on our machines).
//
// Thread-safety: all methods are const and safe to call concurrently.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <string>
#include <string_view>

#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

class RootDir {
 public:
  // Opens the root. Fails if path is not a readable directory.
  static Result<RootDir> open(const std::string& path);

  RootDir(RootDir&&) = default;
  RootDir& operator=(RootDir&&) = default;
  RootDir(const RootDir&) = delete;
  RootDir& operator=(const RootDir&) = delete;
  ~RootDir() = default;

  // Opens rel ("" = the root) with flags; O_NOFOLLOW and O_CLOEXEC are always added.
  // A path that would leave the root or cross a symlink fails with EXDEV or ELOOP.
  Result<UniqueFd> open_at(const std::string& rel, int flags) const;

  // lstat(2) of rel: a symlink is described, not followed.
  Result<struct stat> stat_at(const std::string& rel) const;

  Result<std::string> readlink_at(const std::string& rel) const;

  Result<struct statvfs> statfs() const;

  // statfs(2)'s f_type of the root's filesystem (cachestore/fs_type.h).
  Result<long> fs_type() const;

  // access(2) of rel for this process's credentials; a symlink is checked, not followed.
  Status access_at(const std::string& rel, int mask) const;

  // getxattr/listxattr on rel (a symlink itself, not its target). size 0 asks for the size.
  Result<size_t> getxattr_at(const std::string& rel, const char* name, char* buf,
                             size_t size) const;
  Result<size_t> listxattr_at(const std::string& rel, char* buf, size_t size) const;

  const std::string& path() const { return path_; }

 private:
  RootDir(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  Result<UniqueFd> open_path_only(const std::string& rel) const;

  std::string path_;
  UniqueFd fd_;
};

// fstat(2) wrapped.
Result<struct stat> fstat_fd(int fd, const std::string& context);

// write(2) until all of data is written (retrying short writes and EINTR); the error names
// context.
Status write_all(int fd, std::string_view data, const std::string& context);

}  // namespace epochfs::cachestore
