#include "prefetch/file_registry.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <xxhash.h>

namespace epochfs::prefetch {

using cachestore::MutexLock;

namespace {

uint64_t hash_of(std::string_view path) { return XXH3_64bits(path.data(), path.size()); }

// Whether the stored, NUL-terminated path is path (which holds no NUL), reading no further
// than its terminator.
bool same_path(const char* stored, std::string_view path) {
  return strncmp(stored, path.data(), path.size()) == 0 && stored[path.size()] == '\0';
}

}  // namespace

FileId FileRegistry::id_of(std::string_view path) {
  MutexLock lock(mu_);
  return register_path(path, true, nullptr);
}

FileId FileRegistry::order_id_of(std::string_view path, bool* added) {
  MutexLock lock(mu_);
  return register_path(path, false, added);
}

FileId FileRegistry::register_path(std::string_view path, bool pin, bool* added) {
  if (added != nullptr) {
    *added = false;
  }
  const uint64_t hash = hash_of(path);
  cachestore::IdIndex& shard = shard_of(hash);
  if (const FileId found = find_locked(path, hash); found != kEmpty) {
    if (pin) {
      pinned_[found] = true;
    }
    return found;
  }
  // Room first: nothing below may throw once the record is made.
  most_rehashed_ = std::max(most_rehashed_, shard.make_room());
  const uint32_t place = store_path(path);
  FileId id;
  if (recycled_.empty()) {
    id = static_cast<FileId>(records_.size());
    records_.push_back(Record{place});
    pinned_.push_back(false);
  } else {
    id = recycled_.back();
    recycled_.pop_back();
    records_[id] = Record{place};
    --released_;
  }
  pinned_[id] = pin;
  if (added != nullptr) {
    *added = true;
  }
  shard.insert(id, hash);
  return id;
}

std::optional<FileId> FileRegistry::find(std::string_view path) const {
  MutexLock lock(mu_);
  const FileId id = find_locked(path, hash_of(path));
  return id == kEmpty ? std::nullopt : std::optional<FileId>(id);
}

uint32_t FileRegistry::store_path(std::string_view path) {
  const size_t need = path.size() + 1;
  if (current_ == UINT32_MAX || chunks_[current_].used + need > kChunkBytes) {
    new_chunk(need);
  }
  Chunk& chunk = chunks_[current_];
  const auto place = static_cast<uint32_t>(size_t{current_} << kChunkBits | chunk.used);
  char* at = chunk.bytes.get() + chunk.used;
  memcpy(at, path.data(), path.size());
  at[path.size()] = '\0';
  // A chunk's places are offsets below kChunkBytes: after a longer path, the next starts anew.
  chunk.used = std::min(chunk.used + need, kChunkBytes);
  chunk.live += need;
  return place;
}

void FileRegistry::new_chunk(size_t need) {
  if (free_chunks_.empty() && chunks_.size() >= kMaxChunks) {
    throw std::bad_alloc();
  }
  // A path longer than a chunk (never from the kernel: PATH_MAX is 4096) gets its own.
  auto bytes = std::make_unique<char[]>(std::max(need, kChunkBytes));
  if (free_chunks_.empty()) {
    free_chunks_.push_back(static_cast<uint32_t>(chunks_.size()));
    chunks_.emplace_back();
  }
  current_ = free_chunks_.back();
  free_chunks_.pop_back();
  chunks_[current_] = Chunk{std::move(bytes), 0, 0};
}

void FileRegistry::release(FileId id) {
  MutexLock lock(mu_);
  release_locked(id);
}

std::optional<size_t> FileRegistry::release_unpinned(FileId id) {
  MutexLock lock(mu_);
  if (id >= records_.size() || records_[id].path >= kRecycled || pinned_[id]) {
    return std::nullopt;
  }
  const size_t length = strlen(path_at(records_[id].path));
  release_locked(id);
  return length;
}

bool FileRegistry::pinned(FileId id) const {
  MutexLock lock(mu_);
  return id < records_.size() && pinned_[id];
}

void FileRegistry::release_locked(FileId id) {
  if (id >= records_.size() || records_[id].path >= kRecycled) {
    return;
  }
  const uint32_t place = records_[id].path;
  const std::string_view path(path_at(place));
  const uint64_t hash = hash_of(path);
  shard_of(hash).erase(id, hash);
  const uint32_t chunk = place >> kChunkBits;
  chunks_[chunk].live -= path.size() + 1;
  records_[id] = Record{kReleased};
  ++released_;
  // Under half live: its live paths move to the current chunk (at most half a chunk's bytes
  // copied for at least half a chunk freed), so dead bytes never pass the live ones.
  if (chunk != current_ && 2 * chunks_[chunk].live < chunks_[chunk].used) {
    evacuate(chunk);
  }
}

void FileRegistry::recycle(FileId id) {
  MutexLock lock(mu_);
  if (id < records_.size() && records_[id].path == kReleased) {
    records_[id].path = kRecycled;  // once: twice would give two paths one id
    recycled_.push_back(id);
  }
}

void FileRegistry::evacuate(uint32_t chunk) {
  // Walks the chunk's paths, dead ones too (their bytes stay until the chunk goes): a path is
  // live here if the index gives an id whose record points at this very place.
  const char* bytes = chunks_[chunk].bytes.get();
  for (size_t at = 0; at < chunks_[chunk].used;) {
    const std::string_view path(bytes + at);
    const auto place = static_cast<uint32_t>(size_t{chunk} << kChunkBits | at);
    const FileId id = find_locked(path, hash_of(path));
    if (id != kEmpty && records_[id].path == place) {
      chunks_[chunk].live -= path.size() + 1;
      records_[id].path = store_path(path);  // never this chunk: it is not the current one
    }
    at += path.size() + 1;
  }
  chunks_[chunk] = Chunk{};
  free_chunks_.push_back(chunk);
}

FileId FileRegistry::find_locked(std::string_view path, uint64_t hash) const {
  // Called by find within this call, with mu_ held.
  return shard_of(hash).find(hash, [&](FileId id) NO_THREAD_SAFETY_ANALYSIS {
    return same_path(path_at(records_[id].path), path);
  });
}

size_t FileRegistry::most_rehashed_at_once() const {
  MutexLock lock(mu_);
  return most_rehashed_;
}

void FileRegistry::observe(FileId id, const struct stat& st) {
  MutexLock lock(mu_);
  if (id < records_.size() && records_[id].path < kRecycled) {
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
  return id < records_.size() && records_[id].path < kRecycled
             ? std::string(path_at(records_[id].path))
             : std::string();
}

size_t FileRegistry::size() const {
  MutexLock lock(mu_);
  return records_.size() - released_;
}

size_t FileRegistry::arena_bytes() const {
  MutexLock lock(mu_);
  return (chunks_.size() - free_chunks_.size()) * kChunkBytes;
}

}  // namespace epochfs::prefetch
