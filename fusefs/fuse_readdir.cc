// READDIR and READDIRPLUS: a directory's listing from its DirHandle, the control directory's
// from its fixed entries. Readdirplus gives the attributes (and a node) of entries whose
// attributes the daemon read within the timeout, and lists the others as readdir does: asking
// the source for each entry made a listing wait one source round trip per file, while the
// programs that list datasets (ImageFolder, os.walk, glob) want names only; a program that
// stats them gets each from a LOOKUP.
#include <errno.h>
#include <string.h>

#include <iterator>
#include <vector>

#include "fusefs/control_dir.h"
#include "fusefs/filesystem.h"
#include "fusefs/fuse_reply.h"

namespace epochfs::fusefs {
namespace {

// Adds one entry to buf; returns the bytes used, 0 to skip the entry (it vanished), or
// kNoRoom. For readdirplus an added entry costs a lookup reference, which the kernel then owns.
constexpr ssize_t kNoRoom = -1;

ssize_t add_plain_entry(fuse_req_t req, const DirEntry& d, char* buf, size_t room) {
  if (fuse_add_direntry(req, nullptr, 0, d.name, nullptr, 0) > room) {
    return kNoRoom;
  }
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = d.ino;
  st.st_mode = static_cast<mode_t>(d.type) << 12;
  return static_cast<ssize_t>(fuse_add_direntry(req, buf, room, d.name, &st, d.next_offset));
}

ssize_t add_plus_entry(fuse_req_t req, fuse_ino_t dir, const DirEntry& d, char* buf, size_t room) {
  if (fuse_add_direntry_plus(req, nullptr, 0, d.name, nullptr, 0) > room) {
    return kNoRoom;
  }
  Filesystem& fs = fs_of(req);
  fuse_entry_param e;
  if (strcmp(d.name, ".") == 0 || strcmp(d.name, "..") == 0) {
    // No lookup for . and ..: node id 0 tells the kernel not to instantiate an entry.
    memset(&e, 0, sizeof(e));
    e.attr.st_ino = d.ino;
    e.attr.st_mode = static_cast<mode_t>(d.type) << 12;
  } else {
    auto entry = fs.lookup(dir, d.name, true);
    if (entry.error_code() == EAGAIN) {
      // Listed without a node (as . and ..): a later lookup asks the source.
      memset(&e, 0, sizeof(e));
      e.attr.st_ino = d.ino;
      e.attr.st_mode = static_cast<mode_t>(d.type) << 12;
    } else if (!entry.is_ok()) {
      return 0;
    } else {
      e = make_entry(fs, entry.value().id, entry.value().attr);
    }
  }
  return static_cast<ssize_t>(fuse_add_direntry_plus(req, buf, room, d.name, &e, d.next_offset));
}

// The control directory's listing: ".", "..", then kControlEntries; offsets are positions.
void control_readdir(fuse_req_t req, size_t size, off_t off, bool plus) {
  std::vector<const char*> names = {".", ".."};
  names.insert(names.end(), std::begin(kControlEntries), std::end(kControlEntries));
  std::vector<char> buf(size);
  size_t used = 0;
  for (auto i = static_cast<size_t>(off); i < names.size(); ++i) {
    auto id = control_lookup(kControlDirId, names[i]);
    fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.attr = control_attr(id.value_or(kControlDirId));
    // No nodes for control files here: an open looks them up (with no-open, a snapshot each).
    e.ino = 0;
    const auto next = static_cast<off_t>(i + 1);
    const size_t n =
        plus ? fuse_add_direntry_plus(req, buf.data() + used, size - used, names[i], &e, next)
             : fuse_add_direntry(req, buf.data() + used, size - used, names[i], &e.attr, next);
    if (n > size - used) {
      break;
    }
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                bool plus) {
  if (ino == kControlDirId) {
    control_readdir(req, size, off, plus);
    return;
  }
  DirHandle& dir = *dir_of(fi);
  std::vector<char> buf(size);
  size_t used = 0;
  dir.seek(off);
  while (true) {
    const off_t here = dir.tell();
    auto next = dir.next();
    if (!next) {
      break;
    }
    if (ino == kRootInodeId && strcmp(next->name, kControlDirName) == 0) {
      continue;  // shadowed by the control directory, which listings do not show
    }
    char* at = buf.data() + used;
    const ssize_t n = plus ? add_plus_entry(req, ino, *next, at, size - used)
                           : add_plain_entry(req, *next, at, size - used);
    if (n == kNoRoom) {
      dir.seek(here);  // the next call starts with this entry
      break;
    }
    used += static_cast<size_t>(n);
  }
  fuse_reply_buf(req, buf.data(), used);
}

}  // namespace

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, true);
}

}  // namespace epochfs::fusefs
