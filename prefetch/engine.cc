#include "prefetch/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>

#include "cachestore/copy.h"
#include "cachestore/fs_type.h"
#include "cachestore/log.h"
#include "cachestore/on_exit.h"
#include "prefetch/blocks.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::now_ns;
using cachestore::OnExit;
using cachestore::Result;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// A source on a local disk is called directly (SourceGuardOptions::direct).
SourceGuardOptions guard_options(const cachestore::RootDir& source, SourceGuardOptions options) {
  auto type = source.fs_type();
  options.direct = type.is_ok() && cachestore::is_local_fs(type.value());
  return options;
}

}  // namespace

Engine::Engine(const cachestore::RootDir& source, std::unique_ptr<cachestore::CacheStore> cache,
               EngineOptions options)
    : source_(source),
      options_(options),
      cache_(std::move(cache)),
      copy_concurrency_(options.stage_threads),
      guard_(source, guard_options(source, options.source)),
      uploads_("bytes of uploads being written", "--max-upload-memory-per-user",
               options.limits.upload_bytes_per_user, "--max-upload-memory",
               options.limits.upload_bytes),
      paths_("bytes of paths in the path registry", "--max-path-memory-per-user",
             options.limits.path_bytes_per_user, "--max-path-memory", options.limits.path_bytes),
      publish_cpu_(options.limits.publish_cpu_share * 1000,
                   options.limits.publish_cpu_burst_s * 1000) {
  PlannerOptions planner;
  planner.lookahead = options_.lookahead;
  planner.stage_threads = options_.stage_threads;
  planner.cache_capacity = cache_ ? cache_->stats().capacity_bytes : 0;
  planner.limits = options_.limits;
  planner.reorder_window = options_.reorder_window;
  planner_ = std::make_unique<Planner>(planner);
  if (cache_) {
    cache_->set_policy(std::make_unique<cachestore::NextUsePolicy>(*planner_));
    cache_->set_names([this](FileId id) { return registry_.path_of(id); },
                      [this](FileId id) { return observed_version(id); });
    // Copies kept by an earlier mount (--keep-cache): each is checked against the source's
    // version like any copy, and its hash at first open.
    for (const auto& copy : cache_->take_kept_copies()) {
      cache_->adopt(registry_.id_of(copy.path), copy);
    }
    const uint64_t blocks = planner.cache_capacity / kBlockBytes / 4;
    block_copies_ = std::make_unique<HeldFds>(std::min<uint64_t>(HeldFds::kMaxHeld, blocks),
                                              [this](FileId id) { cache_->unpin(id); });
  }
}

void Engine::start() {
  guard_.start([this] { planner_->replan(); });
  if (cache_ && !stager_) {
    stager_ =
        std::make_unique<Stager>(options_.stage_threads, options_.max_pending_copies, &grace_);
    planner_->start(this);
    cache_->start_cleanup();
  }
  if (!options_.shuffle_file.empty() && !watch_) {
    auto watch = OrderWatch::start(options_.shuffle_file, [this] {
      return begin_upload(OrderUpload::Kind::kOrder, Publisher::mount());
    });
    if (watch.is_ok()) {
      watch_ = std::move(watch).value();
    } else {
      cachestore::log(cachestore::LogLevel::kError, "%s", watch.status().to_string().c_str());
    }
  }
}

Engine::~Engine() {
  // The planner calls into the stager, copies in flight use cache_, and the cache's policy
  // asks the planner: stop them in that order.
  watch_.reset();
  planner_->stop();
  stager_.reset();
  block_copies_.reset();  // unpins its copies: before the cache goes
  cache_.reset();
}

void Engine::observe(const std::string& rel_path, const struct stat& st) {
  // Directories too: their attributes are answered from the registry while the source is down.
  if (cache_ && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
    note_attributes(registry_.id_of(rel_path), st, now_ns());
  }
}

void Engine::note_attributes(FileId id, const struct stat& st, int64_t read_at_ns) {
  registry_.observe(id, st);
  if (S_ISREG(st.st_mode)) {
    fresh_.put(id, st, read_at_ns);
  }
}

std::optional<FileVersion> Engine::trusted_version(FileId id) {
  if (auto st = fresh_.get(id, trusted_since_ns())) {
    return FileVersion::of(*st);
  }
  if (options_.immutable) {
    if (auto st = registry_.last_observed(id)) {
      return FileVersion::of(*st);
    }
  }
  return std::nullopt;
}

std::optional<struct stat> Engine::known_attributes(FileId id) {
  auto st = registry_.last_observed(id);
  if (!st || !may_answer_in_outage()) {
    return std::nullopt;
  }
  if (S_ISREG(st->st_mode) && !cache_->has_ready(id, FileVersion::of(*st))) {
    return std::nullopt;  // no copy of that version: the file cannot be served anyway
  }
  return st;
}

Result<struct stat> Engine::source_attributes(const std::string& rel_path) {
  const auto id = cache_ ? registry_.find(rel_path) : std::nullopt;
  const auto known = id ? known_attributes(*id) : std::nullopt;
  auto st = guard_.call<struct stat>(rel_path, known.has_value(),
                                     [this, rel_path] { return source_.stat_at(rel_path); });
  if (known && answer_instead(st.error_code())) {
    guard_.served_known();
    return *known;
  }
  if (st.is_ok()) {
    observe(rel_path, st.value());
  }
  return st;
}

int64_t Engine::trusted_since_ns() const {
  return options_.immutable ? 0 : now_ns() - static_cast<int64_t>(options_.attr_timeout_s * 1e9);
}

std::optional<struct stat> Engine::fresh_attributes(const std::string& rel_path) {
  if (!cache_) {
    return std::nullopt;
  }
  // find, not id_of: a lookup of a name that does not exist must leave nothing behind.
  const auto id = registry_.find(rel_path);
  auto st = id ? fresh_.get(*id, trusted_since_ns()) : std::nullopt;
  if (st) {
    fresh_lookups_.fetch_add(1, kRelaxed);
  }
  return st;
}

Result<FileVersion> Engine::current_version(FileId id, const std::string& rel_path) {
  if (auto seen = trusted_version(id)) {
    return *seen;
  }
  source_stats_.fetch_add(1, kRelaxed);
  const auto known = known_attributes(id);
  auto st = guard_.call<struct stat>(rel_path, known.has_value(),
                                     [this, rel_path] { return source_.stat_at(rel_path); });
  if (known && answer_instead(st.error_code())) {
    guard_.served_known();
    return FileVersion::of(*known);
  }
  if (!st.is_ok()) {
    return st.status();
  }
  note_attributes(id, st.value(), now_ns());
  return FileVersion::of(st.value());
}

namespace {

struct Opened {
  UniqueFd fd;
  struct stat st;
};

// Opens rel_path in source for reading, with its attributes; a call into the source only.
Result<Opened> open_for_reading(const cachestore::RootDir& source, const std::string& rel_path) {
  // O_NONBLOCK: opening a FIFO that slipped in where a file was must not hang a worker.
  auto fd = source.open_at(rel_path, O_RDONLY | O_NONBLOCK);
  if (!fd.is_ok()) {
    return fd.status();
  }
  auto st = source.stat_fd(fd.value().get(), rel_path);
  if (!st.is_ok()) {
    return st.status();
  }
  return Opened{std::move(fd).value(), st.value()};
}

}  // namespace

Result<OpenFile> Engine::open_source(FileId id, const std::string& rel_path, bool guarded) {
  auto opened = guarded ? guard_.call<Opened>(
                              rel_path, false,
                              [this, rel_path] { return open_for_reading(source_, rel_path); })
                        : open_for_reading(source_, rel_path);
  if (!opened.is_ok()) {
    if (!guarded) {
      guard_.note(opened.status(), rel_path);
    }
    return opened.status();
  }
  const struct stat& st = opened.value().st;
  if (!S_ISREG(st.st_mode)) {
    return Status::error(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "open " + rel_path);
  }
  OpenFile file{std::move(opened.value().fd), FileVersion::of(st), id, false};
  if (cache_) {
    const int64_t now = now_ns();
    note_attributes(id, st, now);
  }
  return file;
}

Result<std::string> Engine::read_source(const OpenFile& file, int fd, size_t size, off_t off) {
  // The path names the file in errors, and is what the guard asks again in an outage.
  const std::string rel_path = cache_ ? registry_.path_of(file.id) : std::string();
  // The fd is the reader's handle's. A call abandoned before its pread may read it after the
  // reader's RELEASE closed it: a reused number then fails (ESPIPE) or reads another file
  // into a buffer nobody looks at.
  return guard_.call<std::string>(
      rel_path, false, [fd, size, off, rel_path]() -> Result<std::string> {
        std::string data(size, '\0');
        auto got = cachestore::pread_full(fd, data.data(), size, off, rel_path);
        if (!got.is_ok()) {
          return got.status();
        }
        data.resize(got.value());
        return data;
      });
}

Result<OpenFile> Engine::open_file(const std::string& rel_path, std::optional<uid_t> opener) {
  const int64_t start = now_ns();
  OnExit timed([&] { open_latency_.record(now_ns() - start); });
  opens_.fetch_add(1, kRelaxed);
  if (!cache_) {
    return open_source(0, rel_path, true);
  }
  const FileId id = registry_.id_of(rel_path);
  if (planner_->reads_by_blocks(id, opener)) {
    return open_block_file(id, rel_path);
  }
  const auto stream = planner_->on_open(id, opener);
  const int stream_index = stream ? static_cast<int>(*stream) : -1;
  OpenOutcome outcome;
  bool own_flight = false;  // this open makes the file's one copy

  // Ends a flight this open owns on every way out (an exception too), unless a copy job took
  // it over: a flight left behind would make every later open of the file wait in vain.
  OnExit guard([&] {
    if (own_flight) {
      flights_.end(id);
    }
  });

  auto version = current_version(id, rel_path);
  if (version.error_code() == EINTR || is_outage_error(version.error_code()) ||
      (version.error_code() == EIO && guard_.down())) {
    return version.status();  // the reader was killed, or the source is down: no second wait
  }
  if (version.is_ok() && !cache_->bypass_hung_disk(id)) {
    auto fd = cache_->open_copy(id, version.value());
    // Claiming the flight before opening the source closes the window in which a prefetch of
    // the same file could start: the source sees one open per file.
    if (!fd && stager_) {
      own_flight = flights_.claim(id) == Flights::Claim::kOwned;
      if (!own_flight) {
        const Flights::Wait wait = wait_for_flight(id, &outcome.stall_ns);
        if (wait == Flights::Wait::kCancelled) {
          return Status::error(EINTR, rel_path);  // the reader was killed while it waited
        }
        outcome.waited = wait != Flights::Wait::kNoFlight;
      }
      // Asked again: the copy waited for, or one whose flight ended between the first look and
      // the claim, may be ready now.
      fd = cache_->open_copy(id, version.value());
      // The copy waited for did not come (it failed, or a prefetch gave up on a file this very
      // open took from its stream's order): this reader makes it.
      if (!fd && !own_flight) {
        own_flight = flights_.claim(id) == Flights::Claim::kOwned;
      }
    }
    if (fd) {
      hits_.fetch_add(1, kRelaxed);
      outcome.hit = true;
      OpenFile file{std::move(*fd), version.value(), id, true, stream_index};
      count_open(file, outcome);
      return file;
    }
  }
  // A failed version check (the source unreachable, or the file gone) is answered by opening
  // the source, which reports the real error to this reader alone. The copy stays: an
  // unreachable source is not a deleted one.
  misses_.fetch_add(1, kRelaxed);
  auto file = open_source(id, rel_path, true);
  if (file.is_ok()) {
    file.value().stream = stream_index;
    count_open(file.value(), outcome);
    if (own_flight && stage_in_background(file.value(), rel_path)) {
      own_flight = false;  // the copy job ends the flight
    }
  }
  return file;
}

void Engine::copy_finished(int64_t latency_ns, uint64_t bytes) {
  copy_latency_.record(latency_ns);
  planner_->copy_finished(latency_ns, bytes);
}

void Engine::count_open(const OpenFile& file, const OpenOutcome& outcome) {
  if (outcome.waited) {
    waits_.fetch_add(1, kRelaxed);
    stall_ns_.fetch_add(outcome.stall_ns, kRelaxed);
  }
  if (file.stream >= 0) {
    planner_->count_open(static_cast<size_t>(file.stream), outcome);
  }
}

void Engine::close_file(const OpenFile& file) {
  if (file.from_cache) {
    cache_->unpin(file.id);
  }
  if (file.blocks) {
    join_when_whole(file);
  }
}

void Engine::drop_failed_copy(const OpenFile& file) {
  cache_->drop(file.id, true);
  cachestore::log(cachestore::LogLevel::kWarning,
                  "cached copy of %s failed while read: reading the source instead",
                  escape_for_log(registry_.path_of(file.id)).c_str());
}

Result<UniqueFd> Engine::source_instead_of_copy(const OpenFile& file) {
  const std::string rel_path = registry_.path_of(file.id);
  auto source = open_source(file.id, rel_path, true);
  if (!source.is_ok()) {
    return source.status();
  }
  if (!(source.value().version == file.version)) {
    return Status::error(EIO, rel_path + " changed while its damaged copy was read");
  }
  return std::move(source.value().fd);
}

void Engine::count_read(const OpenFile& file, uint64_t bytes) {
  if (file.from_cache) {
    bytes_from_cache_.fetch_add(bytes, kRelaxed);
  } else {
    count_source_read(file, bytes);
  }
}

void Engine::count_source_read(const OpenFile& file, uint64_t bytes) {
  bytes_from_source_.fetch_add(bytes, kRelaxed);
  if (file.stream >= 0) {
    planner_->count_source_bytes(static_cast<size_t>(file.stream), bytes);
  }
}

cachestore::DiskWatch::Op Engine::watch_copy_read() {
  return cache_ ? cache_->watch_io() : cachestore::DiskWatch::Op();
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.opens = opens_.load(kRelaxed);
  s.hits = hits_.load(kRelaxed);
  s.misses = misses_.load(kRelaxed);
  s.bytes_from_cache = bytes_from_cache_.load(kRelaxed);
  s.bytes_from_source = bytes_from_source_.load(kRelaxed);
  s.source_stats = source_stats_.load(kRelaxed);
  s.stats_ahead = stats_ahead_.load(kRelaxed);
  s.fresh_lookups = fresh_lookups_.load(kRelaxed);
  s.copies_dropped = copies_dropped_.load(kRelaxed);
  s.files_known = registry_.size();
  s.paths_released = paths_released_.load(kRelaxed);
  s.upload_bytes = uploads_.total();
  s.path_bytes = paths_.total();
  s.uploads_over_limit = uploads_.refused();
  s.waits = waits_.load(kRelaxed);
  s.stall_ns = stall_ns_.load(kRelaxed);
  s.waits_abandoned = waits_abandoned_.load(kRelaxed);
  s.prefetches = prefetches_.load(kRelaxed);
  s.block_hits = block_hits_.load(kRelaxed);
  s.block_misses = block_misses_.load(kRelaxed);
  s.block_waits = block_waits_.load(kRelaxed);
  s.block_stall_ns = block_stall_ns_.load(kRelaxed);
  s.joined_copies = joined_copies_.load(kRelaxed);
  s.joined_bytes = joined_bytes_.load(kRelaxed);
  s.open_latency = open_latency_.snapshot();
  s.copy_latency = copy_latency_.snapshot();
  // Copies in flight, then queued, then the planner: a copy that ends between two of these
  // reads shows in the one before, or has made a planning pass due in the one after.
  if (cache_) {
    s.cache = cache_->stats();
    s.cache_dir = cache_->path();
  }
  s.copies_queued = stager_ ? stager_->pending() : 0;
  s.copy_limit = copy_concurrency_.limit();
  s.planner = planner_->stats();
  s.cache_enabled = cache_ != nullptr;
  s.source = guard_.health();
  return s;
}

}  // namespace epochfs::prefetch
