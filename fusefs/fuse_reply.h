// What the FUSE operations share (fusefs/fuse_ops.cc, fuse_read.cc, fuse_readdir.cc): the
// handles behind a request, error replies, entries; and the operations defined in their own
// files, which fuse_ops.cc registers.
#pragma once

#include <sys/stat.h>

#include "cachestore/status.h"
#include "fusefs/fuse_ops.h"
#include "fusefs/inode_table.h"

namespace epochfs::fusefs {

class Filesystem;
struct FileHandle;
class DirHandle;

Filesystem& fs_of(fuse_req_t req);
FileHandle* file_of(const fuse_file_info* fi);
DirHandle* dir_of(const fuse_file_info* fi);

// Errors a reader does not expect from a healthy source (as opposed to ENOENT, EROFS, EACCES,
// which are answers): worth an operator's attention.
bool is_fault(int err);

// Replies status's error, logged as a warning if it is a fault.
void reply_status(fuse_req_t req, const cachestore::Status& status);

// How long the kernel may keep what it learns of node id: nothing for control files, which
// each open looks up afresh (with no-open, a snapshot of its own).
double attr_timeout(const Filesystem& fs, InodeId id);

fuse_entry_param make_entry(const Filesystem& fs, InodeId id, const struct stat& attr);

// READ: from a cached copy, else from the source (fusefs/fuse_read.cc).
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);

// READDIR and READDIRPLUS (fusefs/fuse_readdir.cc).
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);

}  // namespace epochfs::fusefs
