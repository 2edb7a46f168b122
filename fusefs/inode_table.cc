#include "fusefs/inode_table.h"

#include <algorithm>

namespace epochfs::fusefs {

using cachestore::MutexLock;

InodeTable::InodeTable(const struct stat& root_st, prefetch::FileRegistry& names)
    : names_(names), root_key_{root_st.st_dev, root_st.st_ino} {
  const FileId root = names_.id_of("");
  MutexLock lock(mu_);
  // The kernel never forgets the root; one reference keeps it for the life of the mount.
  by_id_.emplace(kRootInodeId, Inode{root_key_, root, 1, {}, S_IFDIR, false});
  static_assert(sizeof(Inode) == 56);
  by_key_.emplace(root_key_, kRootInodeId);
}

InodeId InodeTable::add_reference(const struct stat& st, const std::string& path,
                                  const NamesFile& names_file) {
  const Found found{Key{st.st_dev, st.st_ino}, FileVersion::of(st),
                    static_cast<uint16_t>(st.st_mode & S_IFMT)};
  const FileId name = names_.id_of(path);
  std::optional<FileId> other;  // the node's other name, to be checked in the source
  {
    MutexLock lock(mu_);
    FileId to_check = kNoName;
    if (auto id = reuse_locked(found, name, nullptr, &to_check)) {
      return *id;
    }
    if (to_check == kNoName || !names_file) {
      return add_node_locked(found, name);
    }
    other = to_check;
  }
  // Only a lookup under a name other than the node's, of an unchanged file, gets here: a hard
  // link, or a file renamed or replaced within one tick of the clock that stamps ctime (a
  // rename changes ctime). Rare, so the stat this costs is too.
  const bool linked = names_file(names_.path_of(*other));
  MutexLock lock(mu_);
  // The table may have changed meanwhile; if the node was renamed again, a new node is safe.
  if (auto id = reuse_locked(found, name, linked ? &*other : nullptr, nullptr)) {
    return *id;
  }
  return add_node_locked(found, name);
}

std::optional<InodeId> InodeTable::reuse_locked(const Found& found, FileId path,
                                                const FileId* linked, FileId* to_check) {
  auto it = by_key_.find(found.key);
  if (it == by_key_.end()) {
    return std::nullopt;
  }
  const InodeId id = it->second;
  Inode& inode = by_id_.at(id);
  if (id == kRootInodeId) {
    // The root reached again through a bind mount inside the source: its path stays "".
    add_one(inode);
    return id;
  }
  if (inode.type != found.type) {
    return std::nullopt;  // another file
  }
  if (found.type == S_IFDIR) {
    // A directory keeps its node as its entries change: a new node would make the kernel drop
    // its cached subtree, and the working directories in it. Found under another name, it was
    // renamed (or is another directory with a reused number): the kernel keeps one name per
    // directory inode and moves its entry to the new name, so the old name cannot lead here.
    add_one(inode);
    inode.path = path;
    inode.seen = stamp_of(found.version);
    return id;
  }
  // A file that changed since the node saw it gets a new node: the kernel starts a new inode,
  // free of what it holds for the old one (pages, a passthrough backing file, the names that
  // led to it). Under another name, only a hard link (the node's name still leads to the file)
  // shares the node; a file can have several names in the kernel, so a renamed file, or a new
  // file with a deleted one's number, gets a new node and the old name keeps the old path.
  if (!inode.saw(found.version)) {
    return std::nullopt;
  }
  if (inode.path != path && (linked == nullptr || *linked != inode.path)) {
    if (to_check != nullptr) {
      *to_check = inode.path;
    }
    return std::nullopt;
  }
  add_one(inode);
  inode.path = path;
  inode.seen = stamp_of(found.version);
  return id;
}

InodeId InodeTable::add_node_locked(const Found& found, FileId path) {
  const InodeId id = next_id_;
  const auto node =
      by_id_.emplace(id, Inode{found.key, path, 1, stamp_of(found.version), found.type, false})
          .first;
  try {
    // An older node of the key lives on until the kernel forgets it, but lookups find this one.
    by_key_.insert_or_assign(found.key, id);
  } catch (...) {
    by_id_.erase(node);
    throw;
  }
  ++next_id_;
  peak_ = std::max(peak_, by_id_.size());
  return id;
}

bool InodeTable::forget(InodeId id, uint64_t n) {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  Inode& inode = it->second;
  if (inode.nlookup != UINT32_MAX) {
    inode.nlookup = n >= inode.nlookup ? 0 : inode.nlookup - static_cast<uint32_t>(n);
  }
  if (inode.nlookup == 0 && id != kRootInodeId) {
    auto current = by_key_.find(inode.key);
    if (current != by_key_.end() && current->second == id) {
      by_key_.erase(current);  // not if a newer node of a changed file took the key
    }
    by_id_.erase(it);
  }
  return true;
}

std::optional<InodeId> InodeTable::node_of(const FileVersion& v) const {
  MutexLock lock(mu_);
  auto it = by_key_.find(Key{static_cast<dev_t>(v.dev), v.ino});
  if (it == by_key_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::optional<std::string> InodeTable::path_of(InodeId id) const {
  FileId path;
  {
    MutexLock lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      return std::nullopt;
    }
    path = it->second.path;
  }
  return names_.path_of(path);
}

bool InodeTable::note_version(InodeId id, const FileVersion& version) {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return false;
  }
  Inode& inode = it->second;
  // An open that found another file (the key differs) counts as a change, now and at the next
  // open: the kernel drops pages it need not have, never keeps ones it should drop.
  const bool unchanged = inode.opened && inode.saw(version);
  inode.opened = true;
  inode.see(version);
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
