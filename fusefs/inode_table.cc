#include "fusefs/inode_table.h"

#include <algorithm>

namespace epochfs::fusefs {

using cachestore::MutexLock;

InodeTable::InodeTable(const struct stat& root_st) : root_key_{root_st.st_dev, root_st.st_ino} {
  MutexLock lock(mu_);
  // The kernel never forgets the root; one reference keeps it for the life of the mount.
  by_id_.emplace(kRootInodeId, Inode{root_key_, "", 1, {}});
  by_key_.emplace(root_key_, kRootInodeId);
}

InodeId InodeTable::add_reference(const struct stat& st, const std::string& path) {
  const Key key{st.st_dev, st.st_ino};
  MutexLock lock(mu_);
  auto [it, inserted] = by_key_.try_emplace(key, next_id_);
  if (!inserted && it->second != kRootInodeId) {
    // A file that changed since it was opened gets a new node: the kernel then starts a new
    // inode for it, free of what it holds for the old version (pages, a passthrough backing
    // file). The old node lives on until the kernel forgets it.
    const FileVersion& opened = by_id_.at(it->second).version;
    if (opened != FileVersion{} && opened != FileVersion::of(st)) {
      it->second = next_id_;
      inserted = true;
    }
  }
  if (inserted) {
    by_id_.emplace(next_id_, Inode{key, path, 1, {}});
    peak_ = std::max(peak_, by_id_.size());
    return next_id_++;
  }
  Inode& inode = by_id_.at(it->second);
  ++inode.nlookup;
  if (inode.path != path && it->second != kRootInodeId) {
    inode.path = path;
  }
  return it->second;
}

bool InodeTable::forget(InodeId id, uint64_t n) {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  Inode& inode = it->second;
  inode.nlookup = n >= inode.nlookup ? 0 : inode.nlookup - n;
  if (inode.nlookup == 0 && id != kRootInodeId) {
    auto current = by_key_.find(inode.key);
    if (current != by_key_.end() && current->second == id) {
      by_key_.erase(current);  // not if a newer node of a changed file took the key
    }
    by_id_.erase(it);
  }
  return true;
}

std::optional<std::string> InodeTable::path_of(InodeId id) const {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return std::nullopt;
  }
  return it->second.path;
}

bool InodeTable::note_version(InodeId id, const FileVersion& version) {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  const bool unchanged = it->second.version == version;
  it->second.version = version;
  return unchanged;
}

bool InodeTable::shrink_if_mostly_forgotten() {
  // Below this, what a shrink gives back is not worth a malloc_trim.
  constexpr size_t kWorthShrinking = 4096;
  MutexLock lock(mu_);
  if (peak_ < kWorthShrinking || by_id_.size() >= peak_ / 4) {
    return false;
  }
  by_id_.rehash(0);
  by_key_.rehash(0);
  peak_ = by_id_.size();
  return true;
}

size_t InodeTable::size() const {
  MutexLock lock(mu_);
  return by_id_.size();
}

uint64_t InodeTable::lookup_count(InodeId id) const {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? 0 : it->second.nlookup;
}

}  // namespace epochfs::fusefs
