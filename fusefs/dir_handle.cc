#include "fusefs/dir_handle.h"

#include <errno.h>

#include <new>

namespace epochfs::fusefs {

using cachestore::Result;
using cachestore::Status;

Result<std::unique_ptr<DirHandle>> DirHandle::create(cachestore::UniqueFd fd, std::string path) {
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) {
    return Status::error(errno, "opendir " + path);
  }
  fd.release();  // the DIR* owns it now
  std::unique_ptr<DirHandle> handle(new (std::nothrow) DirHandle(dir, std::move(path)));
  if (!handle) {
    ::closedir(dir);
    return Status::error(ENOMEM, "opendir");
  }
  return handle;
}

DirHandle::~DirHandle() { ::closedir(dir_); }

void DirHandle::seek(off_t offset) {
  if (offset == offset_) {
    return;
  }
  if (offset == 0) {
    ::rewinddir(dir_);
  } else {
    ::seekdir(dir_, offset);
  }
  offset_ = offset;
}

off_t DirHandle::tell() const { return offset_; }

Result<std::optional<DirEntry>> DirHandle::next() {
  errno = 0;
  // readdir is safe on a stream no other thread uses (glibc); the check cannot tell.
  struct dirent* d = ::readdir(dir_);  // NOLINT(concurrency-mt-unsafe)
  if (d == nullptr) {
    if (errno != 0) {
      return Status::error(errno, "readdir " + path_);
    }
    return std::optional<DirEntry>();
  }
  offset_ = d->d_off;
  return std::optional<DirEntry>(DirEntry{d->d_name, d->d_ino, d->d_type, d->d_off});
}

}  // namespace epochfs::fusefs
