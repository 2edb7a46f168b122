// BlockReaders: which files are read block by block, and for whom.
//
// A range order (prefetch/blocks.h) says how its publisher's job reads a file: by sample, at
// random offsets. It is a statement about that job, not about the file. So a file is read by
// blocks (Engine::read_blocks) only by the user whose live order or manifest names it by
// ranges, or by anyone when the mount's own order (--shuffle-file) does. Another user's opens
// of the same file, and the publisher's own once their job has ended, are served whole as
// before: one user's order never changes how the cache serves anyone else, and naming a file
// one may not read changes nothing for its readers.
//
// Thread-safety: every method may be called from any thread. The lock is a leaf: the Planner
// calls in under its own, and an open asks without it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

using cachestore::FileId;

class BlockReaders {
 public:
  // The reader of the mount's own orders: every user.
  static constexpr uint32_t kAnyone = UINT32_MAX;

  // One more (add) or one fewer (remove) live order of reader names each of files (distinct).
  void add(uint32_t reader, const std::vector<FileId>& files) EXCLUDES(mu_);
  void remove(uint32_t reader, const std::vector<FileId>& files) EXCLUDES(mu_);

  // Whether opener reads file by blocks now. An opener not known (a mount without
  // --allow-other serves one user) reads by blocks if any live order names the file so.
  bool reads_by_blocks(FileId file, std::optional<uid_t> opener) const EXCLUDES(mu_);

  // Files read by blocks by anyone, counted once per reader.
  size_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  mutable cachestore::Mutex mu_;
  // (file, reader) -> the live orders and manifests of reader naming file by ranges.
  std::map<std::pair<FileId, uint32_t>, uint32_t> orders_ GUARDED_BY(mu_);
  // orders_.size(), read without the lock: until a range order is published, an open costs
  // one atomic load here.
  std::atomic<size_t> size_{0};
};

}  // namespace epochfs::prefetch
