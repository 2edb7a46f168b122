// FreshAttrs: the source's attributes of files about to be opened, read ahead of the trainer.
//
// Owner: the Engine. When the kernel has forgotten a file (its attribute timeout passed, or
// memory pressure), opening it starts with a lookup, and a lookup checks the source: one
// metadata round trip in the trainer's path for every file, even one whose copy is cached.
// The planner knows which files come next, so the engine stats them on the stager just
// ahead of the trainer and keeps the results here; a lookup within the attribute timeout of
// that stat answers from it, exactly as the kernel answers from its own cache meanwhile.
//
// Bounded: a direct-mapped table of a fixed number of slots, indexed by file id; a newer file
// takes the slot of an older one. Only the files just ahead of the trainer need to be here.
//
// Thread-safety: all methods lock mu_ (a leaf lock).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

using cachestore::FileId;

class FreshAttrs {
 public:
  static constexpr size_t kDefaultSlots = 16384;  // about 2.6 MB

  explicit FreshAttrs(size_t slots = kDefaultSlots);

  // Records id's attributes, read from the source at now_ns.
  void put(FileId id, const struct stat& st, int64_t now_ns);

  // id's attributes if they were read at or after since_ns.
  std::optional<struct stat> get(FileId id, int64_t since_ns) const;

  // Drops what is kept for id: its id is about to name another path (FileRegistry::recycle).
  void forget(FileId id);

 private:
  struct Slot {
    FileId id = UINT32_MAX;
    int64_t read_at_ns = 0;

    struct stat st {};
  };

  mutable cachestore::Mutex mu_;
  std::vector<Slot> slots_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
