// FileVersion: what identifies one version of a source file.
//
// A rewrite changes at least one of these: size, mtime or ctime in nanoseconds (ctime catches
// `cp -p` and `touch -r`, which restore mtime), or the inode (an atomic replace by rename).
// This is what NFS FS-Cache keeps as coherency data (Linux fs/nfs/fscache.h).
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace epochfs::cachestore {

struct FileVersion {
  int64_t size = -1;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t ino = 0;
  uint64_t dev = 0;

  static FileVersion of(const struct stat& st) {
    return FileVersion{st.st_size, to_ns(st.st_mtim), to_ns(st.st_ctim), st.st_ino, st.st_dev};
  }

  bool valid() const { return size >= 0; }

  // The whole version in 64 bits (XXH3), for what keeps one per file by the million: two
  // versions pass for one another once in 2^64, far below a disk's undetected error rate.
  uint64_t digest() const;

  bool operator==(const FileVersion&) const = default;

 private:
  static int64_t to_ns(const struct timespec& ts) {
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
};

}  // namespace epochfs::cachestore
