// HeldFds: descriptors kept open between uses, by file id, shared by every thread of the
// mount, the least recently used dropped past a bound (and, if set, past an age).
//
// Two sets use it, for files read by blocks (prefetch/blocks.h):
// - The cached copies of blocks (Engine::block_copies_). Such a file is read at random
//   offsets, a block at a time: opening a block's copy for each READ (openat, fstat, close)
//   cost more than the read itself. An open copy here holds its pin
//   (cachestore::CacheStore::open_copy), so its disk space is not counted as free while it is
//   open; the bound (a quarter of the cache's blocks, at most kMaxHeld) keeps what it holds
//   from stalling eviction. A copy is unpinned (`release`) when it has left the set and its
//   last user is done with it, never under mu_: it takes the cache store's lock.
// - The source's open of a file whose blocks are being copied (Engine::block_sources_). Each
//   block's copy opened the file again: a 100 MB file's epoch made 100 opens of one file on
//   the source (on Lustre, each a metadata server's request), and each added the open's
//   latency to its block's copy. Copies of one file now share one open for at most max_age_ns,
//   so that a file replaced in the source is opened again within that time. Either way a block
//   copy records the version its descriptor reads, so an old file's block is never served for
//   the new one.
// Both bounds keep the descriptors far below the daemon's limit.
//
// Thread-safety: all methods may be called concurrently (one leaf mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>

#include "cachestore/file_id.h"
#include "cachestore/file_version.h"
#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"

namespace epochfs::prefetch {

class HeldFds {
 public:
  static constexpr size_t kMaxHeld = 256;

  struct Held {
    cachestore::FileId id = 0;
    cachestore::FileVersion version;  // what fd reads
    cachestore::UniqueFd fd;
    int64_t opened_ns = 0;  // when fd was opened; for the age bound only
  };

  // held: how many descriptors to keep open (at least 1); release: called once per Held that
  // has left the set and has no user left (may be empty); max_age_ns: a Held opened longer ago
  // than this is not found (0: no bound).
  HeldFds(size_t held, std::function<void(cachestore::FileId)> release, int64_t max_age_ns = 0);
  ~HeldFds();
  HeldFds(const HeldFds&) = delete;
  HeldFds& operator=(const HeldFds&) = delete;
  HeldFds(HeldFds&&) = delete;
  HeldFds& operator=(HeldFds&&) = delete;

  // id's held descriptor, if held, of version (any, if none is given) and within the age
  // bound at now_ns; one of another version, or too old, is let go.
  std::shared_ptr<const Held> find(cachestore::FileId id,
                                   const std::optional<cachestore::FileVersion>& version,
                                   int64_t now_ns = 0) EXCLUDES(mu_);
  // Keeps held (its id's earlier one let go) for the uses to come; returns it.
  std::shared_ptr<const Held> hold(Held held) EXCLUDES(mu_);
  // Lets go of id's descriptor (a damaged copy's, a source file that failed a read).
  void forget(cachestore::FileId id) EXCLUDES(mu_);

 private:
  using Lru = std::list<std::shared_ptr<const Held>>;  // most recently used first

  const size_t held_;
  const std::function<void(cachestore::FileId)> release_;
  const int64_t max_age_ns_;
  cachestore::Mutex mu_;
  Lru lru_ GUARDED_BY(mu_);
  std::unordered_map<cachestore::FileId, Lru::iterator> by_id_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
