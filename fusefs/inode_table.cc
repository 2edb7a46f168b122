#include "fusefs/inode_table.h"

#include <stdlib.h>

#include <algorithm>

namespace epochfs::fusefs {

using cachestore::MutexLock;

InodeTable::InodeTable(const struct stat& root_st, prefetch::FileRegistry& names) : names_(names) {
  static_assert(sizeof(Inode) == 32);
  const FileId root = names_.id_of("");
  MutexLock lock(mu_);
  // The kernel never forgets the root; one reference keeps it for the life of the mount.
  const InodeId id =
      add_node_locked(Found{key_of(FileVersion::of(root_st)), FileVersion{}, S_IFDIR, true}, root);
  if (id != kRootInodeId) {
    abort();  // the first slot of a new table is 1, generation 0: FUSE's root id
  }
  slot(1).seen = kNoVersion;
}

InodeId InodeTable::add_reference(const struct stat& st, const std::string& path,
                                  const NamesFile& names_file) {
  const FileVersion version = FileVersion::of(st);
  const auto type = static_cast<uint16_t>(st.st_mode & S_IFMT);
  const FileId name = names_.id_of(path);
  std::optional<FileId> other;  // the node's other name, to be checked in the source
  Found found{};
  {
    MutexLock lock(mu_);
    found = Found{key_of(version), version, type, type == S_IFDIR || st.st_nlink > 1};
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
  const uint32_t n = newest_slot(found, path);
  if (n == cachestore::IdIndex::kNone) {
    return std::nullopt;
  }
  const InodeId id = id_of_slot(n);
  Inode& inode = slot(n);
  if (id == kRootInodeId) {
    // The root reached again through a bind mount inside the source: its path stays "".
    add_one(inode);
    return id;
  }
  if (inode.type != type_bits(found.type)) {
    return std::nullopt;  // another file
  }
  if (found.type == S_IFDIR) {
    // A directory keeps its node as its entries change: a new node would make the kernel drop
    // its cached subtree, and the working directories in it. Found under another name, it was
    // renamed (or is another directory with a reused number): the kernel keeps one name per
    // directory inode and moves its entry to the new name, so the old name cannot lead here.
    add_one(inode);
    inode.path = path;
    inode.seen = found.version.digest();
    return id;
  }
  // A file that changed since the node saw it gets a new node: the kernel starts a new inode,
  // free of what it holds for the old one (pages, a passthrough backing file, the names that
  // led to it). Under another name, only a hard link (the node's name still leads to the file)
  // shares the node; a file can have several names in the kernel, so a renamed file, or a new
  // file with a deleted one's number, gets a new node and the old name keeps the old path.
  if (!inode.saw(found.key, found.version)) {
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
  inode.seen = found.version.digest();
  return id;
}

InodeId InodeTable::add_node_locked(const Found& found, FileId path) {
  by_key_.make_room();  // then nothing below throws
  make_room_for(path);
  const uint32_t n = free_slot_locked();
  Inode& inode = slot(n);
  free_head_ = inode.path;
  inode.ino = found.key.ino;
  inode.device = found.key.device;
  inode.path = path;
  inode.nlookup = 1;
  inode.seen = found.version.digest();
  inode.type = type_bits(found.type);
  inode.opened = false;
  inode.keyed = found.keyed;
  ++chunks_[n / kChunkSlots].live;
  // An older node of the file lives on until the kernel forgets it, but lookups find this one.
  if (found.keyed) {
    const uint64_t hash = hash_of(found.key);
    if (const uint32_t older = newest_slot(found.key); older != cachestore::IdIndex::kNone) {
      by_key_.erase(older, hash);
    }
    by_key_.insert(n, hash);
    by_name_[path] = cachestore::IdIndex::kNone;  // an older node of one name: not the newest
  } else {
    by_name_[path] = n;
  }
  peak_ = std::max(peak_, ++size_);
  return id_of_slot(n);
}

bool InodeTable::forget(InodeId id, uint64_t n) {
  MutexLock lock(mu_);
  Inode* inode = find_locked(id);
  if (inode == nullptr) {
    return false;
  }
  if (id == kRootInodeId) {
    return true;  // kept for the mount's life, whatever the kernel says
  }
  if (inode->nlookup != UINT32_MAX) {
    inode->nlookup = n >= inode->nlookup ? 0 : inode->nlookup - static_cast<uint32_t>(n);
  }
  if (inode->nlookup == 0) {
    // Not from the index if a newer node of a changed file took the key or name (whose
    // place in by_name_ a shrink may then have cut off).
    const auto held = static_cast<uint32_t>(id);
    if (inode->keyed) {
      by_key_.erase(held, hash_of(inode->key()));
    } else if (inode->path < by_name_.size() && by_name_[inode->path] == held) {
      by_name_[inode->path] = cachestore::IdIndex::kNone;
    }
    free_locked(held);
  }
  return true;
}

std::optional<InodeId> InodeTable::node_of(FileId path, const FileVersion& v) const {
  MutexLock lock(mu_);
  uint32_t n = path < by_name_.size() ? by_name_[path] : cachestore::IdIndex::kNone;
  if (n == cachestore::IdIndex::kNone) {
    const std::optional<Key> key = known_key_of(v);
    n = key ? newest_slot(*key) : cachestore::IdIndex::kNone;
  }
  if (n == cachestore::IdIndex::kNone) {
    return std::nullopt;
  }
  return id_of_slot(n);
}

std::optional<std::string> InodeTable::path_of(InodeId id) const {
  FileId path;
  {
    MutexLock lock(mu_);
    const Inode* inode = find_locked(id);
    if (inode == nullptr) {
      return std::nullopt;
    }
    path = inode->path;
  }
  return names_.path_of(path);
}

bool InodeTable::note_version(InodeId id, const FileVersion& version) {
  MutexLock lock(mu_);
  Inode* found = find_locked(id);
  if (found == nullptr) {
    return false;
  }
  Inode& inode = *found;
  // An open that found another file (the key differs, or its device is new) counts as a
  // change, now and at the next open: the kernel drops pages it need not have, never keeps
  // ones it should drop.
  const Key key = known_key_of(version).value_or(Key{kMaxDevices, 0});
  const bool unchanged = inode.opened && inode.saw(key, version);
  inode.opened = true;
  inode.see(key, version);
  return unchanged;
}

bool InodeTable::shrink_if_mostly_forgotten() {
  // Below this, what a shrink gives back is not worth a malloc_trim.
  constexpr size_t kWorthShrinking = 4096;
  MutexLock lock(mu_);
  if (peak_ < kWorthShrinking || size_ >= peak_ / 4) {
    return false;
  }
  give_back_empty_chunks_locked();
  by_key_.shrink();
  // by_name_ needs places only up to the last path with a node.
  size_t used = by_name_.size();
  while (used > 0 && by_name_[used - 1] == cachestore::IdIndex::kNone) {
    --used;
  }
  by_name_.resize(used);
  by_name_.shrink_to_fit();
  peak_ = size_;
  return true;
}

size_t InodeTable::size() const {
  MutexLock lock(mu_);
  return size_;
}

uint64_t InodeTable::lookup_count(InodeId id) const {
  MutexLock lock(mu_);
  const Inode* inode = find_locked(id);
  return inode == nullptr ? 0 : inode->nlookup;
}

uint32_t InodeTable::held_slot(const std::vector<Chunk>& chunks, InodeId id) {
  const auto n = static_cast<uint32_t>(id);
  const size_t chunk = n / kChunkSlots;
  if (n == 0 || chunk >= chunks.size() || !chunks[chunk].slots) {
    return 0;
  }
  const Inode& inode = chunks[chunk].slots[n % kChunkSlots];
  return inode.nlookup != 0 && inode.generation == (id >> 32) ? n : 0;
}

const InodeTable::Inode* InodeTable::find_locked(InodeId id) const {
  const uint32_t n = held_slot(chunks_, id);
  return n == 0 ? nullptr : &slot(n);
}

InodeTable::Inode* InodeTable::find_locked(InodeId id) {
  const uint32_t n = held_slot(chunks_, id);
  return n == 0 ? nullptr : &slot(n);
}

uint32_t InodeTable::newest_slot(const Key& key) const {
  // Called by find within this call, with mu_ held.
  return by_key_.find(hash_of(key),
                      [&](uint32_t n) NO_THREAD_SAFETY_ANALYSIS { return slot(n).key() == key; });
}

uint32_t InodeTable::newest_slot(const Found& found, FileId path) const {
  if (found.keyed) {
    return newest_slot(found.key);
  }
  return path < by_name_.size() ? by_name_[path] : cachestore::IdIndex::kNone;
}

void InodeTable::make_room_for(FileId path) {
  if (path < by_name_.size()) {
    return;
  }
  // A quarter more at a time, not twice: the vector has a place for every path a lookup
  // met, and the registry hands ids out densely.
  const size_t size = std::max<size_t>(path + size_t{1}, by_name_.size() + by_name_.size() / 4);
  by_name_.reserve(size);
  by_name_.resize(size, cachestore::IdIndex::kNone);
}

InodeTable::Key InodeTable::key_of(const FileVersion& v) {
  const auto dev = static_cast<dev_t>(v.dev);
  auto [it, added] = devices_.try_emplace(dev, static_cast<uint32_t>(devices_.size()));
  return Key{std::min(it->second, kMaxDevices - 1), v.ino};
}

std::optional<InodeTable::Key> InodeTable::known_key_of(const FileVersion& v) const {
  auto it = devices_.find(static_cast<dev_t>(v.dev));
  if (it == devices_.end()) {
    return std::nullopt;
  }
  return Key{std::min(it->second, kMaxDevices - 1), v.ino};
}

uint32_t InodeTable::free_slot_locked() {
  if (free_head_ != cachestore::IdIndex::kNone) {
    return free_head_;
  }
  // A chunk given back is made again before a new one, so that slot numbers stay low.
  size_t c = 0;
  while (c < chunks_.size() && chunks_[c].slots) {
    ++c;
  }
  if (c == chunks_.size()) {
    chunks_.reserve(c + 1);
  }
  auto slots = std::make_unique<Inode[]>(kChunkSlots);  // all free: no references
  if (c == chunks_.size()) {
    chunks_.emplace_back();
  }
  Chunk& chunk = chunks_[c];
  chunk.slots = std::move(slots);
  const auto first = static_cast<uint32_t>(c * kChunkSlots);
  for (uint32_t i = kChunkSlots; i-- > 0;) {
    chunk.slots[i].generation = chunk.next_generation;
    if (first + i != 0) {  // no node has id 0
      chunk.slots[i].path = free_head_;
      free_head_ = first + i;
    }
  }
  return free_head_;
}

void InodeTable::free_locked(uint32_t n) {
  Inode& inode = slot(n);
  inode.nlookup = 0;
  --chunks_[n / kChunkSlots].live;
  --size_;
  if (++inode.generation < kMaxGeneration) {
    inode.path = free_head_;
    free_head_ = n;
  }
}

void InodeTable::give_back_empty_chunks_locked() {
  bool gave = false;
  for (size_t c = 1; c < chunks_.size(); ++c) {  // not the root's
    Chunk& chunk = chunks_[c];
    if (chunk.slots && chunk.live == 0) {
      for (uint32_t i = 0; i < kChunkSlots; ++i) {
        chunk.next_generation = std::max(chunk.next_generation, chunk.slots[i].generation);
      }
      gave = true;
    }
  }
  if (!gave) {
    return;
  }
  // Unlinks the free slots of the chunks given back (before their memory goes), keeping the
  // others' order. The lambda is called within this call, with mu_ held.
  const auto going = [this](uint32_t n) NO_THREAD_SAFETY_ANALYSIS {
    const Chunk& chunk = chunks_[n / kChunkSlots];
    return n >= kChunkSlots && chunk.live == 0;
  };
  uint32_t* link = &free_head_;
  while (*link != cachestore::IdIndex::kNone) {
    if (going(*link)) {
      *link = slot(*link).path;
    } else {
      link = &slot(*link).path;
    }
  }
  for (size_t c = 1; c < chunks_.size(); ++c) {
    if (chunks_[c].live == 0) {
      chunks_[c].slots.reset();
    }
  }
}

}  // namespace epochfs::fusefs
