// DirHandle: one open directory of the source, read in pieces by readdir(plus).
//
// Owner: the FUSE adapter stores it in fuse_file_info::fh from opendir to releasedir. The kernel
// serialises readdir calls on one open directory, so it needs no lock.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::fusefs {

struct DirEntry {
  const char* name;  // valid until the next call on the handle
  ino_t ino;
  unsigned char type;  // DT_*
  off_t next_offset;   // resume here to get the entry after this one
};

class DirHandle {
 public:
  // Takes ownership of fd, an open directory. path: the directory's source path.
  static cachestore::Result<std::unique_ptr<DirHandle>> create(cachestore::UniqueFd fd,
                                                               std::string path);

  ~DirHandle();
  DirHandle(const DirHandle&) = delete;
  DirHandle& operator=(const DirHandle&) = delete;

  // Positions the stream; offset 0 is the start, others are next_offset values.
  void seek(off_t offset);

  // Offset of the entry next() would return; seek() to it to read that entry again.
  off_t tell() const;

  // The next entry, nullopt at the end, or an error.
  cachestore::Result<std::optional<DirEntry>> next();

  const std::string& path() const { return path_; }

 private:
  DirHandle(DIR* dir, std::string path) : dir_(dir), path_(std::move(path)) {}

  DIR* dir_;
  std::string path_;
  off_t offset_ = 0;
};

}  // namespace epochfs::fusefs
