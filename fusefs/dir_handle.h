// DirHandle: one open directory of the source, read in pieces by readdir(plus).
//
// The whole listing is read at opendir, on the engine's source guard (prefetch/source_guard.h),
// so that no readdir runs a call into the source on a FUSE worker: a hung source would hold the
// reader unkillably. A handle then serves its listing, a snapshot of the directory at opendir
// (as POSIX allows), and holds no descriptor. With --immutable, the listings read are kept
// (Listings) and served while the source is down.
//
// Owner: the FUSE adapter stores it in fuse_file_info::fh from opendir to releasedir. The kernel
// serialises readdir calls on one open directory, so it needs no lock.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachestore/root_dir.h"
#include "cachestore/status.h"
#include "cachestore/sync.h"

namespace epochfs::fusefs {

struct DirEntry {
  const char* name;  // valid while the handle lives
  ino_t ino;
  unsigned char type;  // DT_*
  off_t next_offset;   // resume here to get the entry after this one
};

// A directory's entries, as read at one time.
class Listing {
 public:
  // Reads the directory rel of source, whole.
  static cachestore::Result<Listing> read(const cachestore::RootDir& source,
                                          const std::string& rel);

  size_t size() const { return entries_.size(); }

  DirEntry at(size_t i) const;

 private:
  struct Entry {
    size_t name;  // offset in names_
    ino_t ino;
    unsigned char type;
  };

  std::string names_;  // NUL-terminated names, one after the other
  std::vector<Entry> entries_;
};

class DirHandle {
 public:
  DirHandle(std::shared_ptr<const Listing> listing, std::string path)
      : listing_(std::move(listing)), path_(std::move(path)) {}

  std::optional<uid_t> charged_to;  // the user whose open it is (Filesystem's ledger)

  // Positions the stream; offset 0 is the start, others are next_offset values.
  void seek(off_t offset) { position_ = offset < 0 ? 0 : static_cast<size_t>(offset); }

  // Offset of the entry next() would return; seek() to it to read that entry again.
  off_t tell() const { return static_cast<off_t>(position_); }

  // The next entry, nullopt at the end.
  std::optional<DirEntry> next();

  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<const Listing> listing_;
  std::string path_;
  size_t position_ = 0;
};

// The listings of an --immutable mount, by directory path, kept to be served while the source
// is down. Bounded by the entries held: past kMaxEntries, no more are kept.
//
// Thread-safety: all methods lock mu_ (a leaf lock).
class Listings {
 public:
  static constexpr size_t kMaxEntries = size_t{4} << 20;  // ImageNet-1k's 1.28 M fit

  void keep(const std::string& path, std::shared_ptr<const Listing> listing);
  std::shared_ptr<const Listing> find(const std::string& path) const;

 private:
  mutable cachestore::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Listing>> by_path_ GUARDED_BY(mu_);
  size_t entries_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::fusefs
