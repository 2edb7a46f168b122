// Engine, continued: files named by range orders, read block by block (prefetch/blocks.h).
// Such a file is opened on the source; each read is cut at block boundaries, and each block
// is served from its cached copy if one is ready (after waiting for a copy in flight), else
// from the source, and then copied into the cache in the background as a miss of a whole
// file is.
#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <memory>

#include "cachestore/log.h"
#include "cachestore/on_exit.h"
#include "prefetch/blocks.h"
#include "prefetch/engine.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::OnExit;
using cachestore::Result;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

Result<OpenFile> Engine::open_block_file(FileId id, const std::string& rel_path) {
  auto file = open_source(id, rel_path, true);
  if (file.is_ok()) {
    file.value().blocks = true;
  }
  return file;
}

Result<std::string> Engine::read_blocks(const OpenFile& file, size_t size, off_t off,
                                        std::atomic<uint64_t>* last_block,
                                        std::optional<uid_t> reader) {
  const auto file_size = static_cast<uint64_t>(file.version.size);
  const auto start = static_cast<uint64_t>(off);
  const uint64_t end = std::min<uint64_t>(file_size, start + size);
  std::string out;
  if (start >= end) {
    return out;
  }
  out.reserve(end - start);
  const std::string path = registry_.path_of(file.id);
  for (uint64_t pos = start; pos < end;) {
    const uint64_t block = pos / kBlockBytes;
    const uint64_t stop = std::min(end, (block + 1) * kBlockBytes);
    auto part = read_block(file, block_key(path, block), block, pos,
                           static_cast<size_t>(stop - pos), last_block, reader);
    if (!part.is_ok()) {
      return part.status();
    }
    out += part.value();
    pos = stop;
  }
  return out;
}

Result<std::string> Engine::read_block(const OpenFile& file, const std::string& key, uint64_t block,
                                       uint64_t off, size_t len, std::atomic<uint64_t>* last_block,
                                       std::optional<uid_t> reader) {
  const auto id = registry_.find(key);
  if (!id) {
    // No order named this block: read through, as an unscheduled file is.
    block_misses_.fetch_add(1, kRelaxed);
    bytes_from_source_.fetch_add(len, kRelaxed);
    return read_source(file, file.fd.get(), len, static_cast<off_t>(off));
  }
  if (last_block->exchange(block, kRelaxed) != block) {
    planner_->on_open(*id, reader);  // the next sample's block: its use, in reader's streams
  }
  const FileVersion version = block_version(file.version, block);
  auto fd = cache_->open_copy(*id, version);
  bool own_flight = false;
  OnExit ended([&] {
    if (own_flight) {
      flights_.end(*id);
    }
  });
  if (!fd && stager_) {
    own_flight = flights_.claim(*id) == Flights::Claim::kOwned;
    if (!own_flight) {
      uint64_t stall_ns = 0;
      if (wait_for_flight(*id, &stall_ns) == Flights::Wait::kCancelled) {
        return Status::error(EINTR, key);  // the reader was killed while it waited
      }
      fd = cache_->open_copy(*id, version);
    }
  }
  if (fd) {
    std::string data(len, '\0');
    auto got = cachestore::pread_full(fd->get(), data.data(), len,
                                      static_cast<off_t>(off - block * kBlockBytes), key);
    cache_->unpin(*id);
    if (got.is_ok() && got.value() == len) {
      block_hits_.fetch_add(1, kRelaxed);
      bytes_from_cache_.fetch_add(len, kRelaxed);
      return data;
    }
    cache_->drop(*id, true);  // damaged: the source's bytes instead
  }
  block_misses_.fetch_add(1, kRelaxed);
  auto data = read_source(file, file.fd.get(), len, static_cast<off_t>(off));
  if (data.is_ok()) {
    bytes_from_source_.fetch_add(len, kRelaxed);
  }
  if (data.is_ok() && own_flight && stage_block_in_background(file, *id, key, block)) {
    own_flight = false;  // the copy job ends the flight
  }
  return data;
}

bool Engine::stage_block_in_background(const OpenFile& file, FileId id, const std::string& key,
                                       uint64_t block) {
  UniqueFd dup(::fcntl(file.fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  auto job = [this, id, key, block, version = file.version,
              fd = std::make_shared<UniqueFd>(std::move(dup))]() mutable {
    OnExit ended([&] { flights_.end(id); });
    const int64_t start = cachestore::now_ns();
    stage(id, key, std::move(*fd), version, block);
    copy_finished(cachestore::now_ns() - start,
                  static_cast<uint64_t>(block_version(version, block).size));
  };
  if (!stager_->try_submit(std::move(job))) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  return true;
}

}  // namespace epochfs::prefetch
