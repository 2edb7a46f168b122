// BlockCopies: the cached copies of blocks (prefetch/blocks.h) kept open between reads, shared
// by every reader of the mount, the least recently read dropped past a bound.
//
// A file read by blocks is read at random offsets, a block at a time: opening a block's copy
// for each READ (openat, fstat, close) cost more than the read itself. An open copy here holds
// its pin (cachestore::CacheStore::open_copy), so its disk space is not counted as free while
// it is open; the bound (a quarter of the cache's blocks, at most kMaxHeld) keeps what it holds
// from stalling eviction, and the descriptors it takes far below the daemon's limit. A copy is
// unpinned when it has left the set and its last reader is done with it, never under mu_: it
// takes the cache store's lock.
//
// The kernel asks for a file read by blocks a READ at a time: 128 KiB around each page fault
// of a memory map, smaller for read(), each a disk read of its own while the copy's pages are
// cold. So a block's copy is read ahead whole (read_ahead) when it is held, and again when it
// is found a while later (kReadAheadNs: its pages may have been reclaimed since); an epoch's
// samples cover the block anyway.
//
// Thread-safety: all methods may be called concurrently (one leaf mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>

#include "cachestore/file_id.h"
#include "cachestore/file_version.h"
#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"

namespace epochfs::prefetch {

class BlockCopies {
 public:
  static constexpr size_t kMaxHeld = 256;
  static constexpr int64_t kReadAheadNs = 1'000'000'000;

  struct Copy {
    cachestore::FileId id = 0;
    cachestore::FileVersion version;
    cachestore::UniqueFd fd;
  };

  // held: how many copies to keep open (at least 1); unpin: called once per copy that has
  // left the set and has no reader left; read_ahead: asks for a copy's pages, never under mu_.
  BlockCopies(size_t held, std::function<void(cachestore::FileId)> unpin,
              std::function<void(const Copy&)> read_ahead);
  ~BlockCopies();
  BlockCopies(const BlockCopies&) = delete;
  BlockCopies& operator=(const BlockCopies&) = delete;

  // id's open copy of version, if held; a copy of another version is let go. now_ns: the
  // caller's clock (tests move it), for when to read the copy ahead again.
  std::shared_ptr<const Copy> find(cachestore::FileId id, const cachestore::FileVersion& version,
                                   int64_t now_ns) EXCLUDES(mu_);
  // Keeps copy (pinned by its opener) open for the reads to come; returns it.
  std::shared_ptr<const Copy> hold(Copy copy, int64_t now_ns) EXCLUDES(mu_);
  // Lets go of id's copy (dropped as damaged, say).
  void forget(cachestore::FileId id) EXCLUDES(mu_);

 private:
  struct Held {
    std::shared_ptr<const Copy> copy;
    int64_t read_ahead_ns;  // when it was last read ahead
  };

  using Lru = std::list<Held>;  // most recently read first

  const size_t held_;
  const std::function<void(cachestore::FileId)> unpin_;
  const std::function<void(const Copy&)> read_ahead_;
  cachestore::Mutex mu_;
  Lru lru_ GUARDED_BY(mu_);
  std::unordered_map<cachestore::FileId, Lru::iterator> by_id_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
