#include "fusefs/passthrough_opens.h"

namespace epochfs::fusefs::passthrough {

Opened OpenTable::begin(uint64_t ino, int fd, Backing backing,
                        const cachestore::FileVersion& version, bool may_register) {
  Shard& shard = shard_of(ino);
  cachestore::MutexLock lock(shard.mu);
  InodeOpens& inode = shard.inodes[ino];
  if (inode.passthrough == 0) {
    const bool from_cache = backing == Backing::kCopy;
    if (inode.cached == 0 && backing != Backing::kNone && fd >= 0 && may_register) {
      inode.backing_id = register_(fd, from_cache);
      inode.source = !from_cache;
      inode.version = version;
    }
    if (inode.backing_id == 0) {
      ++inode.cached;
      return {};
    }
  }
  // The kernel takes no other kind of open of this inode now, nor another backing file.
  ++inode.passthrough;
  if (!(inode.version == version)) {
    // A newer version found by an open of the same inode (a reopen through /proc/PID/fd).
    return {inode.backing_id, false, true};
  }
  return {inode.backing_id, inode.source, false};
}

void OpenTable::end(uint64_t ino, uint32_t backing_id) {
  Shard& shard = shard_of(ino);
  cachestore::MutexLock lock(shard.mu);
  auto it = shard.inodes.find(ino);
  if (it == shard.inodes.end()) {
    return;
  }
  InodeOpens& inode = it->second;
  if (backing_id != 0 && inode.passthrough > 0 && --inode.passthrough == 0) {
    // The kernel has finished opening every file that named the id (their releases came).
    unregister_(inode.backing_id);
    inode.backing_id = 0;
  } else if (backing_id == 0 && inode.cached > 0) {
    --inode.cached;
  }
  if (inode.passthrough == 0 && inode.cached == 0) {
    shard.inodes.erase(it);
  }
}

uint64_t OpenTable::backing_files() {
  uint64_t n = 0;
  for (Shard& shard : shards_) {
    cachestore::MutexLock lock(shard.mu);
    for (const auto& entry : shard.inodes) {
      n += entry.second.backing_id != 0 ? 1 : 0;
    }
  }
  return n;
}

}  // namespace epochfs::fusefs::passthrough
