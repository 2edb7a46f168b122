#include "fusefs/fuse_reply.h"

#include <errno.h>
#include <string.h>

#include "cachestore/log.h"
#include "fusefs/control_dir.h"
#include "fusefs/filesystem.h"

namespace epochfs::fusefs {

using cachestore::LogLevel;

// fh carries a pointer to a handle the Filesystem owns from open/opendir to release.
static_assert(sizeof(FileHandle*) <= sizeof(fuse_file_info::fh));
static_assert(sizeof(DirHandle*) <= sizeof(fuse_file_info::fh));

Filesystem& fs_of(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

FileHandle* file_of(const fuse_file_info* fi) { return reinterpret_cast<FileHandle*>(fi->fh); }

DirHandle* dir_of(const fuse_file_info* fi) { return reinterpret_cast<DirHandle*>(fi->fh); }

bool is_fault(int err) {
  switch (err) {
    case EIO:
    case ESTALE:
    case ETIMEDOUT:
    case ENOTCONN:
    case EREMOTEIO:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return true;
    default:
      return false;
  }
}

void reply_status(fuse_req_t req, const cachestore::Status& status) {
  if (!status.is_ok()) {
    const LogLevel level = is_fault(status.error_code()) ? LogLevel::kWarning : LogLevel::kDebug;
    if (cachestore::log_enabled(level)) {
      cachestore::log(level, "%s", status.to_string().c_str());
    }
  }
  fuse_reply_err(req, status.error_code());
}

double attr_timeout(const Filesystem& fs, InodeId id) {
  return is_control(id) ? 0 : fs.options().attr_timeout_s;
}

namespace {

double entry_timeout(const Filesystem& fs, InodeId id) {
  return is_control(id) && id != kControlDirId ? 0 : fs.options().entry_timeout_s;
}

}  // namespace

fuse_entry_param make_entry(const Filesystem& fs, InodeId id, const struct stat& attr) {
  fuse_entry_param e;
  memset(&e, 0, sizeof(e));
  e.ino = id;
  e.attr = attr;
  e.attr_timeout = attr_timeout(fs, id);
  e.entry_timeout = entry_timeout(fs, id);
  return e;
}

}  // namespace epochfs::fusefs
