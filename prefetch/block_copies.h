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

  struct Copy {
    cachestore::FileId id = 0;
    cachestore::FileVersion version;
    cachestore::UniqueFd fd;
  };

  // held: how many copies to keep open (at least 1); unpin: called once per copy that has
  // left the set and has no reader left.
  BlockCopies(size_t held, std::function<void(cachestore::FileId)> unpin);
  ~BlockCopies();
  BlockCopies(const BlockCopies&) = delete;
  BlockCopies& operator=(const BlockCopies&) = delete;

  // id's open copy of version, if held; a copy of another version is let go.
  std::shared_ptr<const Copy> find(cachestore::FileId id, const cachestore::FileVersion& version)
      EXCLUDES(mu_);
  // Keeps copy (pinned by its opener) open for the reads to come; returns it.
  std::shared_ptr<const Copy> hold(Copy copy) EXCLUDES(mu_);
  // Lets go of id's copy (dropped as damaged, say).
  void forget(cachestore::FileId id) EXCLUDES(mu_);

 private:
  using Lru = std::list<std::shared_ptr<const Copy>>;  // most recently read first

  const size_t held_;
  const std::function<void(cachestore::FileId)> unpin_;
  cachestore::Mutex mu_;
  Lru lru_ GUARDED_BY(mu_);
  std::unordered_map<cachestore::FileId, Lru::iterator> by_id_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
