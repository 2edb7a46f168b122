// Engine, continued: a whole copy joined from a file's cached blocks. A file a range order names
// is read block by block through the daemon: a READ round trip per page fault, even once every
// block is cached. Where the kernel reads cached copies itself (passthrough), a whole copy of
// the file serves its reader as a local disk would (docs/benchmarks.md, "Single-file
// datasets"). It is made only into free room: it has no next use of its own, so it is the
// first copy evicted when blocks an order names need the room.
#include <errno.h>

#include <utility>
#include <vector>

#include "cachestore/copy.h"
#include "cachestore/log.h"
#include "cachestore/on_exit.h"
#include "prefetch/blocks.h"
#include "prefetch/engine.h"
#include "prefetch/order_parser.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::OnExit;
using cachestore::Result;

Result<OpenFile> Engine::open_block_file(FileId id, const std::string& rel_path) {
  auto file = open_source(id, rel_path, true);
  if (!file.is_ok()) {
    return file;
  }
  if (kernel_reads()) {
    // Of the version just opened: a copy of another is dropped.
    if (auto whole = cache_->open_copy(id, file.value().version)) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return OpenFile{std::move(*whole), file.value().version, id, true};
    }
  }
  file.value().blocks = std::make_shared<BlockReads>(rel_path);
  return file;
}

bool Engine::read_whole(FileId block) {
  if (!kernel_reads()) {
    return false;
  }
  const auto of = parse_block_key(registry_.path_of(block));
  const auto file = of ? registry_.find(of->path) : std::nullopt;
  return file && cache_->contains(*file);
}

void Engine::join_when_whole(const OpenFile& file) {
  const int64_t now = cachestore::now_ns();
  if (!stager_ || !kernel_reads() || file.version.size <= 0 || join_refused_.recent(file.id, now) ||
      join_tried_.marked(file.id, now) || cache_->contains(file.id) ||
      flights_.claim(file.id) != Flights::Claim::kOwned) {
    return;
  }
  auto job = [this, id = file.id, path = file.blocks->path, version = file.version] {
    OnExit ended([&] { flights_.end(id); });
    join_blocks(id, path, version);
  };
  if (!stager_->try_submit(std::move(job), Stager::Priority::kPrefetch)) {
    flights_.end(file.id);
  }
}

void Engine::join_blocks(FileId id, const std::string& rel_path, const FileVersion& version) {
  const auto size = static_cast<uint64_t>(version.size);
  const uint64_t blocks = (size + kBlockBytes - 1) / kBlockBytes;
  std::vector<FileId> ids;
  ids.reserve(blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    // Asked without opening: open_copy would drop a copy of another version, which may be
    // the newer one.
    const auto block = registry_.find(block_key(rel_path, b));
    if (!block || !cache_->has_ready(*block, block_version(version, b))) {
      return;
    }
    ids.push_back(*block);
  }
  auto staging = cache_->begin_staging(id, size, false);
  if (!staging) {
    join_refused_.marked(id, cachestore::now_ns());
    return;
  }
  bool cache_fault = false;
  cachestore::Status copied;
  // One block's copy open at a time: a file of 100 GB has 100,000 of them.
  for (uint64_t b = 0; b < blocks && copied.is_ok() && !stager_->stopping(); ++b) {
    const FileVersion piece = block_version(version, b);
    auto fd = cache_->open_copy(ids[b], piece);
    if (!fd) {
      copied = cachestore::Status::error(ENOENT, "a block went");
      break;
    }
    OnExit unpinned([&] { cache_->unpin(ids[b]); });
    copied = cachestore::copy_range(fd->get(), 0, *staging, b * kBlockBytes,
                                    static_cast<uint64_t>(piece.size), &cache_fault);
    flights_.note_progress(id);
  }
  if (copied.is_ok() && stager_->stopping()) {
    copied = cachestore::Status::error(ECANCELED, "unmounting");
  }
  auto hash = copied.is_ok() ? cachestore::hash_fd(staging->fd(), size) : Result<uint64_t>(copied);
  if (!hash.is_ok()) {
    // What failed may fail the same way at every close (a cache filesystem without
    // copy_file_range): held off as a file with no room is.
    join_refused_.marked(id, cachestore::now_ns());
    drop_staging(std::move(*staging), hash.status(), cache_fault, "joining the blocks of",
                 rel_path);
    return;
  }
  if (cache_->commit(std::move(*staging), version, hash.value()).is_ok()) {
    joined_copies_.fetch_add(1, std::memory_order_relaxed);
    joined_bytes_.fetch_add(size, std::memory_order_relaxed);
  }
}

}  // namespace epochfs::prefetch
