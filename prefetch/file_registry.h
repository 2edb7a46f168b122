// FileRegistry: dense ids for source files, and the last version seen of each.
//
// Owner: the Engine. Every file the mount opens or looks up, and every path a published order
// names, gets a FileId, kept until the owner releases it (the cache index and the schedule use
// ids as array indices, so an id is handed out again only when its owner recycles it, having
// made sure nothing refers to it any more). The registry also remembers the attributes last read
// from the source, however long ago: what the mount answers while the source is down, and what
// an open trusts with --immutable. When recent ones were read is FreshAttrs' business
// (prefetch/fresh_attrs.h): only the files about to be opened need it.
//
// Memory, because a dataset has millions of files (ImageNet: 1.28 M): under 100 bytes per
// file. Paths are stored once, NUL-terminated, in 1 MiB arena chunks (at most 4,096 of them:
// 4 GiB of paths); a released path's bytes are dead until its chunk is under half live, when
// the chunk's live paths move to the newest chunk and the chunk is freed, so the arena holds at
// most about twice the live paths whatever is released; a record is a 32-bit place in them plus the
// version without its device and the index of its shape, which holds the device (40 bytes); the
// path -> id index is an open-addressing table of 32-bit ids (linear probing, at most 70% full), so
// it holds no copy of the path. The index is kShards tables, picked by the hash's top byte, each
// growing on its own: a growth rehashes 1/256 of the paths (reading each from the arena), not
// all of them under the lock every open takes; one table of 16 M paths stalled opens for ~1 s.
// `epochfs-lab bench-policy` measures it (docs/benchmarks.md).
//
// Thread-safety: all methods lock mu_ (a leaf lock) for memory work only.
#pragma once

#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/file_version.h"
#include "cachestore/id_index.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

using cachestore::FileId;
using cachestore::FileVersion;

class FileRegistry {
 public:
  // What a path costs besides its bytes: its NUL, its record and its index slot.
  static constexpr size_t kBytesPerPath = 49;

  // The id of path, assigned on first use, and pinned: kept for the mount's life, as every
  // path the kernel, a reader or the cache has used is.
  FileId id_of(std::string_view path);
  // The same for a path only an order names: not pinned, so it can be released once no order
  // holds it (Engine::reclaim). A pinned path stays pinned. *added (if given): whether this
  // call registered it, rather than found it.
  FileId order_id_of(std::string_view path, bool* added = nullptr);
  // The id of path if it has one; assigns none.
  std::optional<FileId> find(std::string_view path) const;

  // Records id's attributes (its version, and what a stat says beyond it) read from the
  // source.
  void observe(FileId id, const struct stat& st);

  // id's attributes as last observed, however long ago: what the mount answers while the
  // source is down. Times other than mtime and ctime, and the block counts, are made up.
  std::optional<struct stat> last_observed(FileId id) const;

  // The path of id; empty if id was never handed out, or is released.
  std::string path_of(FileId id) const;

  // Forgets id's path: find and id_of no longer give id for it (a new id_of gives a new id),
  // path_of gives "", and its bytes are freed. id is not handed out again until recycled.
  void release(FileId id);
  // Releases id unless it is pinned or already released, in one step (a lookup pinning it
  // meanwhile keeps it): the length of the path released, or nullopt.
  std::optional<size_t> release_unpinned(FileId id);
  bool pinned(FileId id) const;
  // A released id may be handed out again: its owner knows nothing refers to it.
  void recycle(FileId id);

  // Ids handed out and not released.
  size_t size() const;
  // Bytes the arena holds for paths, live or dead.
  size_t arena_bytes() const;

  // The most paths one growth of the index rehashed, for tests.
  size_t most_rehashed_at_once() const;

 private:
  // The part of a stat that is not the version; a dataset has few distinct ones, so each is
  // stored once and a record holds its index (4 bytes instead of 16).
  struct Shape {
    uint32_t mode, uid, gid, nlink;
    uint64_t dev;
    bool operator==(const Shape&) const = default;
  };

  struct ShapeHash {
    size_t operator()(const Shape& s) const {
      return std::hash<uint64_t>()(
          ((uint64_t{s.mode} << 32 | s.uid) * 31 + (uint64_t{s.gid} << 32 | s.nlink)) * 31 + s.dev);
    }
  };

  static constexpr uint32_t kNoShape = UINT32_MAX;

  // A record's path when it has none: released, and then also recycled (waiting in recycled_).
  static constexpr uint32_t kReleased = UINT32_MAX;
  static constexpr uint32_t kRecycled = UINT32_MAX - 1;

  // The version last seen, but for its device (in its shape).
  struct Record {
    uint32_t path;              // in chunks_ (path_at), or kReleased or kRecycled
    uint32_t shape = kNoShape;  // index in shapes_; kNoShape: never seen
    int64_t size = -1;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint64_t ino = 0;
  };

  uint32_t shape_of(const struct stat& st) REQUIRES(mu_);

  static constexpr FileId kEmpty = cachestore::IdIndex::kNone;
  static constexpr unsigned kChunkBits = 20;
  static constexpr size_t kChunkBytes = size_t{1} << kChunkBits;
  // One short of the places 32 bits hold, so that no place is kReleased or kRecycled.
  static constexpr size_t kMaxChunks = (size_t{1} << (32 - kChunkBits)) - 1;

  // One arena chunk: paths written one after another, each ended by a NUL.
  struct Chunk {
    std::unique_ptr<char[]> bytes;  // null: a free slot
    size_t used = 0;                // bytes written (at most kChunkBytes)
    size_t live = 0;                // of them, bytes of paths not released
  };

  // Where path now is in chunks_; throws std::bad_alloc past 4 GiB of paths.
  uint32_t store_path(std::string_view path) REQUIRES(mu_);
  // A chunk slot with fresh bytes, made current.
  void new_chunk(size_t need) REQUIRES(mu_);
  // Moves chunk's live paths to the current chunk and frees it.
  void evacuate(uint32_t chunk) REQUIRES(mu_);

  const char* path_at(uint32_t place) const REQUIRES(mu_) {
    return chunks_[place >> kChunkBits].bytes.get() + (place & (kChunkBytes - 1));
  }

  // The index is kShards tables (cachestore/id_index.h), picked by the hash's top byte; each
  // slot keeps the hash's low 32 bits. A probe compares a path only where the bits match:
  // comparing every probed path (two cache misses and a strlen each) was 57% of the daemon's
  // time publishing an order of 1.28 million paths.
  static constexpr size_t kShards = 256;

  cachestore::IdIndex& shard_of(uint64_t hash) REQUIRES(mu_) { return shards_[hash >> 56]; }

  const cachestore::IdIndex& shard_of(uint64_t hash) const REQUIRES(mu_) {
    return shards_[hash >> 56];
  }

  // The id of path (whose hash is hash), or kEmpty.
  FileId find_locked(std::string_view path, uint64_t hash) const REQUIRES(mu_);

  mutable cachestore::Mutex mu_;
  FileId register_path(std::string_view path, bool pin, bool* added) REQUIRES(mu_);
  void release_locked(FileId id) REQUIRES(mu_);

  std::deque<Record> records_ GUARDED_BY(mu_);    // by id; a deque grows without copying
  std::vector<bool> pinned_ GUARDED_BY(mu_);      // by id
  std::vector<FileId> recycled_ GUARDED_BY(mu_);  // ids to hand out again
  size_t released_ GUARDED_BY(mu_) = 0;           // records released, recycled or not
  std::vector<Chunk> chunks_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_chunks_ GUARDED_BY(mu_);  // slots of chunks_ freed
  uint32_t current_ GUARDED_BY(mu_) = UINT32_MAX;      // the chunk written to; none yet
  std::array<cachestore::IdIndex, kShards> shards_ GUARDED_BY(mu_);
  size_t most_rehashed_ GUARDED_BY(mu_) = 0;
  std::vector<Shape> shapes_ GUARDED_BY(mu_);
  std::unordered_map<Shape, uint32_t, ShapeHash> shape_ids_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
