// Engine, continued: files named by range orders, read block by block (prefetch/blocks.h).
// Such a file is opened on the source; each read is cut at block boundaries, and each block
// is served from its cached copy if one is ready (after waiting for a copy in flight), else
// from the source, and then copied into the cache in the background as a miss of a whole
// file is. Also what a block copy is kept or dropped at: its file's version (observed_version).
#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <memory>
#include <utility>

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

// A READ spanning two blocks is one sample's at most: a page fault's read-around (centred on
// the faulting page) or a read() of the sample itself, so only the block holding its middle
// counts it as a sample.
BlockUse block_use(const OpenFile& file, uint64_t start, uint64_t end) {
  const uint64_t last_end = file.blocks->last_end.exchange(end, kRelaxed);
  return BlockUse{(start + (end - start) / 2) / kBlockBytes, start != last_end};
}
}  // namespace

Result<std::string> Engine::read_blocks(const OpenFile& file, size_t size, off_t off,
                                        std::optional<uid_t> reader) {
  const auto file_size = static_cast<uint64_t>(file.version.size);
  const auto start = static_cast<uint64_t>(off);
  const uint64_t end = std::min<uint64_t>(file_size, start + size);
  std::string out(start < end ? end - start : 0, '\0');
  const BlockUse use = block_use(file, start, end);
  for (uint64_t pos = start; pos < end;) {
    const uint64_t block = pos / kBlockBytes;
    const uint64_t stop = std::min(end, (block + 1) * kBlockBytes);
    Status read = read_block(file, block, pos, static_cast<size_t>(stop - pos), reader, use,
                             out.data() + (pos - start));
    if (!read.is_ok()) {
      return read;
    }
    pos = stop;
  }
  return out;
}

Status Engine::read_block(const OpenFile& file, uint64_t block, uint64_t off, size_t len,
                          std::optional<uid_t> reader, const BlockUse& use, char* out) {
  const std::string key = block_key(file.blocks->path, block);
  const auto id = registry_.find(key);
  const auto from_source = [&]() -> Status {
    block_misses_.fetch_add(1, kRelaxed);
    auto data = read_source(file, file.fd.get(), len, static_cast<off_t>(off));
    if (!data.is_ok()) {
      return data.status();
    }
    if (data.value().size() != len) {
      return Status::error(EIO, "read " + key + ": the source ended early");
    }
    bytes_from_source_.fetch_add(len, kRelaxed);
    std::copy(data.value().begin(), data.value().end(), out);
    return Status::ok();
  };
  if (!id) {
    return from_source();  // no order named this block: read through, as an unordered file
  }
  planner_->on_block_read(*id, len, use.fresh_for(block), reader);
  const FileVersion version = block_version(file.version, block);
  if (read_copy(*id, block, version, off, len, out)) {
    return Status::ok();
  }
  bool own_flight = false;
  OnExit ended([&] {
    if (own_flight) {
      flights_.end(*id);
    }
  });
  if (stager_) {
    own_flight = flights_.claim(*id) == Flights::Claim::kOwned;
    if (!own_flight) {
      uint64_t stall_ns = 0;
      const Flights::Wait waited = wait_for_flight(*id, &stall_ns);
      if (waited != Flights::Wait::kNoFlight) {
        block_waits_.fetch_add(1, kRelaxed);
        block_stall_ns_.fetch_add(stall_ns, kRelaxed);
      }
      if (waited == Flights::Wait::kCancelled) {
        return Status::error(EINTR, key);  // the reader was killed while it waited
      }
      if (read_copy(*id, block, version, off, len, out)) {
        return Status::ok();
      }
    }
  }
  Status read = from_source();
  if (read.is_ok() && own_flight && stage_block_in_background(file, *id, key, block)) {
    own_flight = false;  // the copy job ends the flight
  }
  return read;
}

std::optional<Engine::BlockSlice> Engine::block_slice(const OpenFile& file, size_t size, off_t off,
                                                      std::optional<uid_t> reader) {
  const auto start = static_cast<uint64_t>(off);
  const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(file.version.size), start + size);
  const uint64_t block = start / kBlockBytes;
  if (!cache_ || start >= end || (end - 1) / kBlockBytes != block) {
    return std::nullopt;
  }
  const auto id = registry_.find(block_key(file.blocks->path, block));
  auto copy = id ? held_copy(*id, block_version(file.version, block)) : nullptr;
  if (!copy) {
    return std::nullopt;
  }
  planner_->on_block_read(*id, end - start, block_use(file, start, end).fresh_for(block), reader);
  return BlockSlice{std::move(copy), static_cast<off_t>(start - block * kBlockBytes),
                    static_cast<size_t>(end - start)};
}

void Engine::block_slice_done(const BlockSlice& slice, bool read) {
  if (read) {
    block_hits_.fetch_add(1, kRelaxed);
    bytes_from_cache_.fetch_add(slice.len, kRelaxed);
    return;
  }
  block_copies_->forget(slice.copy->id);
  cache_->drop(slice.copy->id, true);  // damaged: read_blocks reads the source instead
}

std::shared_ptr<const HeldFds::Held> Engine::held_copy(FileId id, const FileVersion& version) {
  auto copy = block_copies_->find(id, version);
  if (!copy) {
    auto fd = cache_->open_copy(id, version);
    if (!fd) {
      return nullptr;
    }
    copy = block_copies_->hold(HeldFds::Held{id, version, std::move(*fd)});
  }
  // Its pages may never have been read, or been reclaimed since: asked for at once, whatever
  // the planner asked (its queue may hold a whole epoch's blocks; this reader is here now).
  if (!read_recently_.marked(id, cachestore::now_ns())) {
    cache_->read_ahead(copy->fd.get(), static_cast<uint64_t>(version.size));
  }
  return copy;
}

bool Engine::read_copy(FileId id, uint64_t block, const FileVersion& version, uint64_t off,
                       size_t len, char* out) {
  auto copy = held_copy(id, version);
  if (!copy) {
    return false;
  }
  auto got = cachestore::pread_full(copy->fd.get(), out, len,
                                    static_cast<off_t>(off - block * kBlockBytes), "block copy");
  if (got.is_ok() && got.value() == len) {
    block_hits_.fetch_add(1, kRelaxed);
    bytes_from_cache_.fetch_add(len, kRelaxed);
    return true;
  }
  block_copies_->forget(id);
  cache_->drop(id, true);  // damaged: dropped, and the source read instead
  return false;
}

bool Engine::stage_block_in_background(const OpenFile& file, FileId id, const std::string& key,
                                       uint64_t block) {
  UniqueFd dup(::fcntl(file.fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  auto job = [this, id, key, block, version = file.version,
              fd = std::make_shared<UniqueFd>(std::move(dup))] {
    OnExit ended([&] { flights_.end(id); });
    const int64_t start = cachestore::now_ns();
    stage(id, key, fd->get(), version, block);
    copy_finished(cachestore::now_ns() - start,
                  static_cast<uint64_t>(block_version(version, block).size));
  };
  if (!stager_->try_submit(std::move(job))) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  return true;
}

std::optional<Engine::CopyOf> Engine::copy_of(FileId id) const {
  if (const auto st = registry_.last_observed(id)) {
    return CopyOf{id, FileVersion::of(*st)};
  }
  // A block (prefetch/blocks.h) is never observed itself: its file is.
  const auto block = parse_block_key(registry_.path_of(id));
  const auto file = block ? registry_.find(block->path) : std::nullopt;
  const auto st = file ? registry_.last_observed(*file) : std::nullopt;
  if (!st) {
    return std::nullopt;
  }
  return CopyOf{*file, block_version(FileVersion::of(*st), block->block)};
}

std::optional<FileVersion> Engine::observed_version(FileId id) const {
  const auto copy = copy_of(id);
  return copy ? std::optional(copy->version) : std::nullopt;
}

cachestore::VerifyReport Engine::verify_cache() {
  if (!cache_) {
    return {};
  }
  cachestore::VerifyReport report = cache_->verify_all();
  for (FileId id : report.dropped) {
    block_copies_->forget(id);  // a block's copy held open would go on serving its bytes
  }
  return report;
}

}  // namespace epochfs::prefetch
