// RootDir: a directory tree read without ever leaving it.
//
// Every access goes through openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS relative to
// one directory fd opened at startup. So a path can neither climb out with "..", nor pass
// through a symlink (even one swapped in after we looked the path up), nor reach a magic link
// in /proc. Symlinks are objects we stat and readlink, never follow: the kernel resolves them
// on the client's side of the mount, where the target names a path in the mount itself.
//
// Holds one fd (the root) for its lifetime, plus one more each time the source is mounted
// again underneath it (reopen); every other fd it opens is returned to the caller, so the
// number of open fds never grows with the number of files (the open-files limit is a hard
// 20,000 on our machines).
//
// Thread-safety: all methods are const and safe to call concurrently. The root in use is an
// atomic fd; a replaced one stays open until the RootDir goes, since a call may be using it.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cachestore/status.h"
#include "cachestore/sync.h"
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

  // lstat(2) of rel: a symlink is described, not followed. st_dev is normalized (below).
  Result<struct stat> stat_at(const std::string& rel) const;
  // fstat(2) of fd, a file opened through this root, with st_dev normalized: after a reopen,
  // the new mount's device number reads as the first one's, so that a file unchanged across
  // the remount (same inode number, size and times: an NFS client mounted again) keeps its
  // version, and its cached copy.
  Result<struct stat> stat_fd(int fd, const std::string& context) const;

  Result<std::string> readlink_at(const std::string& rel) const;

  Result<struct statvfs> statfs() const;

  // statfs(2)'s f_type of the root's filesystem (cachestore/fs_type.h).
  Result<long> fs_type() const;

  // access(2) of rel for this process's credentials; a symlink is checked, not followed.
  // effective: with the calling thread's filesystem ids, groups and capabilities
  // (AT_EACCESS), the path walked with them too; else with the real ids.
  Status access_at(const std::string& rel, int mask, bool effective = false) const;

  // getxattr/listxattr on rel (a symlink itself, not its target). size 0 asks for the size.
  Result<size_t> getxattr_at(const std::string& rel, const char* name, char* buf,
                             size_t size) const;
  Result<size_t> listxattr_at(const std::string& rel, char* buf, size_t size) const;

  const std::string& path() const { return path_; }

  // Opens the root again by its path, for a source mounted again where it was (a network
  // filesystem's client restarted, its old connection dead): if the path now leads to a
  // directory that answers, on a filesystem of the same type as the first root's (not the
  // empty directory under a mount point between an unmount and the next mount), it becomes
  // the root and reopen returns true. Bounded: after kMaxReopens, false.
  bool reopen() const;
  // Times the root was opened again.
  unsigned reopens() const;

  static constexpr unsigned kMaxReopens = 64;

 private:
  struct Fds {
    std::atomic<int> current{-1};
    dev_t first_dev = 0;                // the root's device at open
    long first_type = 0;                // and its filesystem's type (statfs f_type)
    std::atomic<dev_t> current_dev{0};  // the current root's
    Mutex mu;
    std::vector<UniqueFd> all GUARDED_BY(mu);  // every root opened, the current one last
  };

  RootDir(std::string path, UniqueFd fd);

  int root_fd() const { return fds_->current.load(std::memory_order_acquire); }

  void normalize(struct stat& st) const;
  Result<UniqueFd> open_path_only(const std::string& rel) const;

  std::string path_;
  std::unique_ptr<Fds> fds_;  // behind a pointer: a RootDir moves
};

// fstat(2) wrapped.
Result<struct stat> fstat_fd(int fd, const std::string& context);

// write(2) until all of data is written (retrying short writes and EINTR); the error names
// context.
Status write_all(int fd, std::string_view data, const std::string& context);

// pread(2) of size bytes at off into buf until all are read or the file ends (retrying short
// reads and EINTR): the bytes read, fewer than size only at the end of the file; the error
// names context.
Result<size_t> pread_full(int fd, char* buf, size_t size, off_t off, const std::string& context);

}  // namespace epochfs::cachestore
