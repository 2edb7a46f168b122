#include "prefetch/file_registry.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <xxhash.h>

namespace epochfs::prefetch {

using cachestore::MutexLock;

namespace {

uint64_t hash_of(std::string_view path) { return XXH3_64bits(path.data(), path.size()); }

// The shard comes from the hash's top byte (shard_of), the slot from its low bits, the tag from
// the byte below the top.
uint8_t tag_of(uint64_t hash) { return static_cast<uint8_t>(hash >> 48); }

// Each shard's table starts this small: an empty registry holds 256 of them.
constexpr size_t kFirstSlots = 64;

// Whether the stored, NUL-terminated path is path (which holds no NUL), reading no further
// than its terminator.
bool same_path(const char* stored, std::string_view path) {
  return strncmp(stored, path.data(), path.size()) == 0 && stored[path.size()] == '\0';
}

}  // namespace

FileId FileRegistry::id_of(std::string_view path) {
  MutexLock lock(mu_);
  const uint64_t hash = hash_of(path);
  Shard& shard = shard_of(hash);
  // Grow at 70% full: linear probing stays short, and the tables cost under 8 bytes per file.
  if (10 * (shard.used + 1) > 7 * shard.ids.size()) {
    grow(shard);
  }
  const size_t slot = find_slot(shard, path, hash);
  if (shard.ids[slot] != kEmpty) {
    return shard.ids[slot];
  }
  const auto id = static_cast<FileId>(records_.size());
  records_.push_back(Record{store_path(path)});
  shard.ids[slot] = id;
  shard.tags[slot] = tag_of(hash);
  ++shard.used;
  return id;
}

std::optional<FileId> FileRegistry::find(std::string_view path) const {
  MutexLock lock(mu_);
  const uint64_t hash = hash_of(path);
  const Shard& shard = shard_of(hash);
  if (shard.ids.empty()) {
    return std::nullopt;
  }
  const FileId id = shard.ids[find_slot(shard, path, hash)];
  return id == kEmpty ? std::nullopt : std::optional<FileId>(id);
}

uint32_t FileRegistry::store_path(std::string_view path) {
  const size_t need = path.size() + 1;
  if (chunk_used_ + need > kChunkBytes) {
    if (arena_.size() >= kMaxChunks) {
      throw std::bad_alloc();
    }
    // A path longer than a chunk (never from the kernel: PATH_MAX is 4096) gets its own.
    arena_.push_back(std::make_unique<char[]>(std::max(need, kChunkBytes)));
    chunk_used_ = 0;
  }
  const auto place = static_cast<uint32_t>((arena_.size() - 1) << kChunkBits | chunk_used_);
  char* at = arena_.back().get() + chunk_used_;
  memcpy(at, path.data(), path.size());
  at[path.size()] = '\0';
  // A chunk's places are offsets below kChunkBytes: after a longer path, the next starts anew.
  chunk_used_ = std::min(chunk_used_ + need, kChunkBytes);
  return place;
}

size_t FileRegistry::find_slot(const Shard& shard, std::string_view path, uint64_t hash) const {
  const size_t mask = shard.ids.size() - 1;
  const uint8_t tag = tag_of(hash);
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const FileId id = shard.ids[slot];
    if (id == kEmpty || (shard.tags[slot] == tag && same_path(path_at(records_[id].path), path))) {
      return slot;
    }
  }
}

void FileRegistry::grow(Shard& shard) {
  std::vector<FileId> old = std::move(shard.ids);
  shard.ids.assign(std::max(kFirstSlots, 2 * old.size()), kEmpty);
  shard.tags.assign(shard.ids.size(), 0);
  for (FileId id : old) {
    if (id != kEmpty) {
      const std::string_view path(path_at(records_[id].path));
      const uint64_t hash = hash_of(path);
      const size_t slot = find_slot(shard, path, hash);
      shard.ids[slot] = id;
      shard.tags[slot] = tag_of(hash);
    }
  }
  most_rehashed_ = std::max(most_rehashed_, shard.used);
}

size_t FileRegistry::most_rehashed_at_once() const {
  MutexLock lock(mu_);
  return most_rehashed_;
}

void FileRegistry::observe(FileId id, const struct stat& st) {
  MutexLock lock(mu_);
  if (id < records_.size()) {
    const FileVersion v = FileVersion::of(st);
    Record& r = records_[id];
    r.size = v.size;
    r.mtime_ns = v.mtime_ns;
    r.ctime_ns = v.ctime_ns;
    r.ino = v.ino;
    r.shape = shape_of(st);
  }
}

uint32_t FileRegistry::shape_of(const struct stat& st) {
  const Shape shape{st.st_mode, st.st_uid, st.st_gid, static_cast<uint32_t>(st.st_nlink),
                    static_cast<uint64_t>(st.st_dev)};
  auto [it, added] = shape_ids_.try_emplace(shape, static_cast<uint32_t>(shapes_.size()));
  if (added) {
    shapes_.push_back(shape);
  }
  return it->second;
}

std::optional<struct stat> FileRegistry::last_observed(FileId id) const {
  MutexLock lock(mu_);
  if (id >= records_.size() || records_[id].shape == kNoShape) {
    return std::nullopt;
  }
  const Record& r = records_[id];
  const Shape& shape = shapes_[r.shape];
  struct stat st = {};
  st.st_mode = shape.mode;
  st.st_uid = shape.uid;
  st.st_gid = shape.gid;
  st.st_nlink = shape.nlink;
  st.st_size = r.size;
  st.st_ino = r.ino;
  st.st_dev = shape.dev;
  st.st_mtim = {r.mtime_ns / 1000000000, r.mtime_ns % 1000000000};
  st.st_ctim = {r.ctime_ns / 1000000000, r.ctime_ns % 1000000000};
  st.st_atim = st.st_mtim;
  st.st_blksize = 4096;
  st.st_blocks = (r.size + 511) / 512;
  return st;
}

std::string FileRegistry::path_of(FileId id) const {
  MutexLock lock(mu_);
  return id < records_.size() ? std::string(path_at(records_[id].path)) : std::string();
}

size_t FileRegistry::size() const {
  MutexLock lock(mu_);
  return records_.size();
}

}  // namespace epochfs::prefetch
