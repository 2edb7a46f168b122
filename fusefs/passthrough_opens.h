// The passthrough open table: per inode, the opens the kernel has now and the backing file
// they share. The kernel takes either passthrough opens of an inode sharing one backing file,
// or cached-mode opens, never both at once, and one backing file per inode: this table keeps
// epochfs's replies to those rules (fusefs/passthrough.h says how they were found).
//
// Kernel-free: registering and unregistering a backing file are the caller's functions (the
// FUSE device's ioctls in passthrough.cc), so the policy is tested without a mount.
//
// Thread-safety: every method may be called from any thread. The table is sharded by inode;
// a shard's lock is held across a registration, so that the decision and the kernel's table
// agree per inode (one lock for all inodes made 16 readers of different files wait on each
// other: docs/benchmarks.md).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "cachestore/file_version.h"
#include "cachestore/sync.h"

namespace epochfs::fusefs::passthrough {

// What an open could be read from by the kernel: the cached copy, the source file (a miss, on
// a local filesystem: see Filesystem::source_is_local), or nothing (a classic open).
enum class Backing { kCopy, kSource, kNone };

struct Opened {
  uint32_t backing_id = 0;    // 0: a classic open
  bool reads_source = false;  // the backing file is a source file (this open's or an earlier)
  // The backing file holds another version than this open's: the open names it (the kernel
  // takes no other kind of open of the inode now) with FOPEN_DIRECT_IO, so that its reads
  // come to the daemon, which serves them from the open's own file.
  bool direct = false;
};

class OpenTable {
 public:
  // Registers fd as a backing file: its id, or 0 if refused.
  using Register = std::function<uint32_t(int fd, bool from_cache)>;
  using Unregister = std::function<void(uint32_t backing_id)>;

  OpenTable(Register reg, Unregister unreg)
      : register_(std::move(reg)), unregister_(std::move(unreg)) {}

  // An open of ino, serving fd (version of the file) of kind backing. fd becomes the inode's
  // backing file if the inode has no open now and may_register; while the inode has
  // passthrough opens, every open shares their backing id (so an open of a copy made meanwhile
  // reads the source until they end), and one of another version is direct. Every call is
  // matched by one end().
  Opened begin(uint64_t ino, int fd, Backing backing, const cachestore::FileVersion& version,
               bool may_register);

  // An open of ino ends; the backing file is unregistered with its last passthrough open.
  void end(uint64_t ino, uint32_t backing_id);

  // Backing files registered now (each pins one file in the kernel).
  uint64_t backing_files();

 private:
  struct InodeOpens {
    uint32_t backing_id = 0;
    bool source = false;              // the backing file is a source file, not a cached copy
    cachestore::FileVersion version;  // the backing file's
    unsigned passthrough = 0;
    unsigned cached = 0;
  };

  struct alignas(64) Shard {
    cachestore::Mutex mu;
    std::unordered_map<uint64_t, InodeOpens> inodes GUARDED_BY(mu);
  };

  static constexpr size_t kShards = 64;

  Shard& shard_of(uint64_t ino) { return shards_[ino % kShards]; }

  const Register register_;
  const Unregister unregister_;
  std::array<Shard, kShards> shards_;
};

}  // namespace epochfs::fusefs::passthrough
