// Engine, continued: copies into the cache. Prefetches the planner asks for (within its
// slots), the background copy of a reader's miss, and the source stats of cached files just
// ahead of their opens.
#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <memory>

#include "cachestore/copy.h"
#include "cachestore/log.h"
#include "cachestore/on_exit.h"
#include "prefetch/blocks.h"
#include "prefetch/credentials.h"
#include "prefetch/engine.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::now_ns;
using cachestore::OnExit;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr int64_t kProgressEveryNs = 100'000'000;

// Errors that say an order's entry is unusable, as opposed to the source being in trouble.
bool names_no_file(int err) {
  return err == ENOENT || err == ENOTDIR || err == ELOOP || err == EXDEV || err == EISDIR ||
         err == EINVAL || err == ENAMETOOLONG;
}

}  // namespace

unsigned Engine::prefetch_slots() {
  if (guard_.down()) {
    return 0;  // staging pauses; the planner plans again when the source is back (replan)
  }
  const unsigned limit = copy_concurrency_.limit();
  const unsigned queued = flights_.prefetches();
  return queued >= limit ? 0 : limit - queued;
}

bool Engine::prefetch(FileId id, size_t stream) {
  if (!stager_) {
    return false;
  }
  if (const auto bytes = cache_->entry_bytes(id)) {
    stat_ahead(id);  // a block's key names no file: its stat finds none, and is dropped
    check_cached_entry(id, stream, *bytes);
    return false;
  }
  std::string path = registry_.path_of(id);
  if (path.empty()) {
    return false;  // released: an upload found it just before (engine_reclaim.cc)
  }
  const uint64_t gen = flights_.begin_prefetch(id);
  if (gen == 0) {
    return false;
  }
  auto job = [this, id, stream, gen, path = std::move(path)] {
    if (!flights_.start_prefetch(id, gen)) {
      return;  // a reader took the copy over while it was queued
    }
    OnExit ended([&] {  // a throw must not leave the flight (and slot)
      flights_.end(id);
      planner_->slot_freed();
    });
    prefetch_copy(id, stream, path);
  };
  bool queued = false;
  try {
    queued = stager_->try_submit(std::move(job), Stager::Priority::kPrefetch);
  } catch (const std::bad_alloc&) {
    queued = false;
  }
  if (!queued) {
    flights_.end(id, gen);
    return false;
  }
  prefetches_.fetch_add(1, kRelaxed);
  return true;
}

bool Engine::fresh_for_open(FileId id) {
  const int64_t half_timeout_ns = static_cast<int64_t>(options_.attr_timeout_s * 0.5e9);
  return fresh_.get(id, options_.immutable ? 0 : now_ns() - half_timeout_ns).has_value();
}

void Engine::stat_ahead(FileId id) {
  if (!fresh_for_open(id)) {
    // Demand priority: a stat is short, and it is needed within the attribute timeout.
    queue_for_job(stats_ahead_queue_, id, Stager::Priority::kDemand, &Engine::drain_stats_ahead);
  }
}

void Engine::queue_for_job(IdBatches& queue, FileId id, Stager::Priority priority,
                           void (Engine::*drain)()) {
  if (!queue.push(id)) {
    return;  // a job running takes it
  }
  bool started = false;
  try {
    started = stager_->try_submit([this, drain] { (this->*drain)(); }, priority);
  } catch (const std::bad_alloc&) {
    started = false;
  }
  if (!started) {
    queue.not_started();
  }
}

void Engine::read_ahead(FileId id) {
  if (!read_ahead_recently_.marked(id, now_ns())) {
    queue_for_job(reads_ahead_queue_, id, Stager::Priority::kPrefetch, &Engine::drain_reads_ahead);
  }
}

void Engine::drain_reads_ahead() {
  for (auto batch = reads_ahead_queue_.take(); !batch.empty(); batch = reads_ahead_queue_.take()) {
    for (const FileId id : batch) {
      if (stager_->stopping()) {
        return;
      }
      // Not if its order ended meanwhile, nor if its file is read whole now.
      if (planner_->next_use(id) != Planner::kNever && !read_whole(id)) {
        cache_->read_in(id);
      }
    }
  }
}

void Engine::drain_stats_ahead() {
  for (auto batch = stats_ahead_queue_.take(); !batch.empty(); batch = stats_ahead_queue_.take()) {
    for (const FileId id : batch) {
      if (stager_->stopping()) {
        return;  // the unmount: not worth a call into the source
      }
      if (fresh_for_open(id)) {
        continue;  // queued twice, or looked up meanwhile
      }
      const std::string path = registry_.path_of(id);
      const int64_t asked_at = now_ns();  // fresh from the moment it was asked, not answered
      auto st = source_.stat_at(path);
      if (!st.is_ok() || !S_ISREG(st.value().st_mode)) {
        guard_.note(st.status(), path);
        continue;  // the lookup asks the source itself and reports what it finds
      }
      note_attributes(id, st.value(), asked_at);
      stats_ahead_.fetch_add(1, kRelaxed);
    }
  }
}

void Engine::prefetch_copy(FileId id, size_t stream, const std::string& rel_path) {
  if (planner_->next_use(id) == Planner::kNever) {
    return;  // its order was replaced while the copy waited in the queue
  }
  // A block of a range order (prefetch/blocks.h) is a part of its file.
  const auto block = parse_block_key(rel_path);
  const std::string& source_path = block ? block->path : rel_path;
  auto reader = planner_->reader_of(stream);
  if (!reader || !may_stage_for(id, stream, *reader, source_path)) {
    return;  // the stream is gone, or its publisher may not read the file
  }
  // Each call into the source that returns is progress: a reader waiting for this copy gives
  // up on it when one call takes the source's timeout, not when a slow source's calls add up
  // to it (wait_for_flight).
  flights_.note_progress(id);
  const int64_t start = now_ns();
  // The file itself was registered with its blocks (OrderUpload::add_range).
  const FileId file_id = block ? registry_.id_of(source_path) : id;
  auto opened = copy_source(file_id, source_path, block.has_value());
  if (!opened.is_ok()) {
    if (names_no_file(opened.error_code())) {
      planner_->reject_entry(stream, source_path, opened.status().to_string());
    }
    return;
  }
  flights_.note_progress(id);
  const std::shared_ptr<const HeldFds::Held> source = std::move(opened.value());
  const FileVersion& version = source->version;
  if (block && block_version(version, block->block).size == 0) {
    planner_->reject_entry(stream, rel_path, "the range starts past the end of the file");
    return;
  }
  const auto size =
      static_cast<uint64_t>(block ? block_version(version, block->block).size : version.size);
  if (!stage(id, rel_path, source->fd.get(), version,
             block ? std::optional<uint64_t>(block->block) : std::nullopt) &&
      block) {
    block_sources_.forget(file_id);  // the next block opens the file again
  }
  const int64_t end = now_ns();
  // Busy: at least 3/4 of the slots in flight (this copy's counts: it ends on the way out).
  // Copies that ended a moment ago leave their slots free until the planner's next pass.
  const bool busy = 4 * flights_.prefetches() >= 3 * copy_concurrency_.limit();
  copy_concurrency_.finished(end - start, end, busy);
  copy_finished(end - start, size);
}

void Engine::check_cached_entry(FileId id, size_t stream, uint64_t bytes) {
  constexpr uint64_t kReadAheadMinBytes = 256 << 10;
  auto reader = planner_->reader_of(stream);
  if (!reader) {
    return;
  }
  // Only blocks are read ahead (their keys name no source path); a small copy is no block.
  const bool large = bytes >= kReadAheadMinBytes;
  if (reader->uid == 0 || rights_checked_.confirmed(id, reader->fingerprint())) {
    if (large && parse_block_key(registry_.path_of(id))) {
      read_ahead(id);
    }
    return;
  }
  auto job = [this, id, stream, large, reader = std::move(reader), path = registry_.path_of(id)] {
    const auto block = parse_block_key(path);
    if (may_stage_for(id, stream, *reader, block ? block->path : path) && large && block) {
      read_ahead(id);
    }
  };
  try {
    // Not checked now if the queue is full: the next epoch's entry asks again.
    stager_->try_submit(std::move(job), Stager::Priority::kPrefetch);
  } catch (const std::bad_alloc&) {
  }
}

bool Engine::may_stage_for(FileId id, size_t stream, const Credentials& reader,
                           const std::string& rel_path) {
  if (Status readable = may_read_as(source_, rel_path, reader); !readable.is_ok()) {
    planner_->reject_entry(stream, rel_path, readable.to_string());
    return false;
  }
  rights_checked_.confirm(id, reader.fingerprint());
  return true;
}

Flights::Wait Engine::wait_for_flight(FileId id, uint64_t* stall_ns) {
  // Idle past stuck_copy_s, a copy is given up on if the cache disk is hung; else it waits on
  // the source, which the reader would read no faster itself: given up on only once one call
  // has taken as long as makes the source count as down. (A source taking 1 s a read gave a
  // block's copy its first 256 KiB after 2 s, and each waiter read the block a second time.)
  const auto stuck_ns = static_cast<int64_t>(options_.stuck_copy_s * 1e9);
  const auto down_ns =
      static_cast<int64_t>(std::max(options_.stuck_copy_s, options_.source.timeout_s) * 1e9);
  int64_t idle_ns = 0;
  const auto stuck = [&](int64_t idle) {
    idle_ns = idle;
    return idle >= down_ns || (idle >= stuck_ns && cache_->disk_hung());
  };
  const auto wait =
      flights_.wait(id, static_cast<int64_t>(options_.max_wait_s * 1e9), stuck, stall_ns);
  if (wait == Flights::Wait::kStuck) {
    waits_abandoned_.fetch_add(1, kRelaxed);
    cachestore::log(cachestore::LogLevel::kWarning,
                    "the copy of %s has read and written nothing for %.0f s (cache disk or source "
                    "stuck?): reading the source instead",
                    escape_for_log(registry_.path_of(id)).c_str(),
                    static_cast<double>(idle_ns) / 1e9);
  }
  return wait;
}

bool Engine::stage_in_background(const OpenFile& file, const std::string& rel_path) {
  // The copy reads through its own descriptor of the same open file: positioned reads do not
  // disturb the reader, and no second open reaches the source. The caller holds the flight.
  UniqueFd dup(::fcntl(file.fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  auto job = [this, id = file.id, path = rel_path, version = file.version,
              fd = std::make_shared<UniqueFd>(std::move(dup))] {
    OnExit ended([&] { flights_.end(id); });
    const int64_t start = now_ns();
    stage(id, path, fd->get(), version);
    copy_finished(now_ns() - start, static_cast<uint64_t>(version.size));
  };
  if (!stager_->try_submit(std::move(job))) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return false;
  }
  return true;
}

cachestore::Result<std::shared_ptr<const HeldFds::Held>> Engine::copy_source(
    FileId file, const std::string& rel_path, bool shared) {
  const int64_t now = now_ns();
  if (auto held = shared ? block_sources_.find(file, std::nullopt, now) : nullptr) {
    return held;
  }
  auto opened = open_source(file, rel_path, false);
  if (!opened.is_ok()) {
    return opened.status();
  }
  HeldFds::Held held{file, opened.value().version, std::move(opened.value().fd), now};
  return shared ? block_sources_.hold(std::move(held))
                : std::make_shared<const HeldFds::Held>(std::move(held));
}

bool Engine::stage(FileId id, const std::string& rel_path, int fd, const FileVersion& file_version,
                   std::optional<uint64_t> block) {
  const FileVersion version = block ? block_version(file_version, *block) : file_version;
  auto staging = cache_->begin_staging(id, static_cast<uint64_t>(version.size));
  if (!staging) {
    return true;
  }
  bool cache_fault = false;
  // Progress only tells a waiter the copy is not stuck (--stuck-copy, seconds): noted at most
  // every kProgressEveryNs, a copy of a typical sample takes no lock for it at all.
  int64_t noted_ns = now_ns();
  const auto progress = [&] {
    const int64_t now = now_ns();
    if (now - noted_ns >= kProgressEveryNs) {
      noted_ns = now;
      flights_.note_progress(id);
    }
  };
  auto hash =
      cachestore::copy_into(fd, *staging, &cache_fault, progress, block ? *block * kBlockBytes : 0);
  if (!hash.is_ok()) {
    if (!cache_fault) {
      guard_.note(hash.status(), rel_path);
    }
    drop_staging(std::move(*staging), hash.status(), cache_fault, "staging", rel_path);
    return cache_fault;
  }
  // A copy that raced a change of the source is discarded, never published.
  auto after = source_.stat_fd(fd, rel_path);
  if (!after.is_ok() || !(FileVersion::of(after.value()) == file_version)) {
    cache_->abort(std::move(*staging), 0);
    return false;
  }
  Status committed = cache_->commit(std::move(*staging), version, hash.value());
  if (!committed.is_ok()) {
    cachestore::log(cachestore::LogLevel::kDebug, "%s", committed.to_string().c_str());
  }
  return true;
}

void Engine::drop_staging(cachestore::Staging staging, const Status& why, bool cache_fault,
                          const char* doing, const std::string& rel_path) {
  cachestore::log(cachestore::LogLevel::kDebug, "%s %s: %s", doing,
                  escape_for_log(rel_path).c_str(), why.to_string().c_str());
  cache_->abort(std::move(staging), cache_fault ? why.error_code() : 0);
}

}  // namespace epochfs::prefetch
