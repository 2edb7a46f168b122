// ImplicitOpens: the daemon's own opens for reads that come without one (--data-path no-open).
//
// Answered ENOSYS to an OPEN, the kernel stops sending OPEN, FLUSH and RELEASE for every file
// of the mount and keeps each file's pages across opens, as FOPEN_KEEP_CACHE would: a file
// whose pages are cached never reaches the daemon again. Reads of the others come with no file
// handle, so the daemon opens the file itself, through the same Filesystem::open as an OPEN
// (version check, cached copy or source, hit and miss counting, the planner's progress).
//
// A read from offset 0 is taken as a reader starting the file: it opens afresh, which is what
// prefetch counts as the file's open. Later reads of the file reuse the latest open while it
// is kept. At most `capacity` opens are kept (least recently used dropped first), so the fds
// held stay bounded whatever the number of inodes; a read in flight keeps its open alive.
//
// Thread-safety: all methods may be called from any FUSE worker; mu_ is a leaf lock.
#pragma once

#include <sys/types.h>

#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "fusefs/inode_table.h"

namespace epochfs::fusefs {

class Filesystem;
struct FileHandle;

class ImplicitOpens {
 public:
  // An open of one file, released (Filesystem::release) when its last user lets go.
  class Lease {
   public:
    Lease(Filesystem& fs, FileHandle* handle) : fs_(fs), handle_(handle) {}

    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    FileHandle& handle() const { return *handle_; }

   private:
    Filesystem& fs_;
    FileHandle* handle_;
  };

  ImplicitOpens(Filesystem& fs, size_t capacity) : fs_(fs), capacity_(capacity) {}

  // The open to serve a read of ino at offset with (see above); the open's error otherwise.
  cachestore::Result<std::shared_ptr<Lease>> for_read(InodeId ino, uint64_t offset,
                                                      std::optional<uid_t> opener = std::nullopt);

  // Lets the open kept for ino go (its copy was found damaged): the next read opens afresh.
  // A read in flight keeps it until done.
  void drop(InodeId ino);

  size_t kept() const;

 private:
  using Order = std::list<InodeId>;  // most recently used first

  std::shared_ptr<Lease> find(InodeId ino);
  void keep(InodeId ino, std::shared_ptr<Lease> lease);

  Filesystem& fs_;
  const size_t capacity_;
  mutable cachestore::Mutex mu_;
  Order order_ GUARDED_BY(mu_);
  std::unordered_map<InodeId, std::pair<std::shared_ptr<Lease>, Order::iterator>> leases_
      GUARDED_BY(mu_);
};

}  // namespace epochfs::fusefs
