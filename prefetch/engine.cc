#include "prefetch/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>

#include "cachestore/log.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::Result;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Engine::Engine(const cachestore::RootDir& source, std::unique_ptr<cachestore::CacheStore> cache,
               EngineOptions options)
    : source_(source), options_(options), cache_(std::move(cache)) {
  if (cache_) {
    // Copies kept by an earlier mount (--keep-cache): each is checked against the source's
    // version like any copy, and its hash at first open.
    for (const auto& copy : cache_->take_kept_copies()) {
      cache_->adopt(registry_.id_of(copy.path), copy);
    }
  }
}

void Engine::start() {
  if (cache_ && !stager_) {
    stager_ = std::make_unique<Stager>(options_.staging_threads, options_.max_pending_copies);
  }
}

Engine::~Engine() {
  // Copies in flight use cache_: stop them before the cache goes.
  stager_.reset();
  cache_.reset();
}

void Engine::observe(const std::string& rel_path, const struct stat& st) {
  if (cache_ && S_ISREG(st.st_mode)) {
    registry_.observe(registry_.id_of(rel_path), FileVersion::of(st), now_ns());
  }
}

Result<FileVersion> Engine::current_version(FileId id, const std::string& rel_path) {
  const int64_t since =
      options_.immutable ? 0 : now_ns() - static_cast<int64_t>(options_.attr_timeout_s * 1e9);
  if (auto seen = registry_.observed_since(id, since)) {
    return *seen;
  }
  source_stats_.fetch_add(1, kRelaxed);
  auto st = source_.stat_at(rel_path);
  if (!st.is_ok()) {
    return st.status();
  }
  const FileVersion version = FileVersion::of(st.value());
  registry_.observe(id, version, now_ns());
  return version;
}

Result<OpenFile> Engine::open_source(FileId id, const std::string& rel_path) {
  // O_NONBLOCK: opening a FIFO that slipped in where a file was must not hang a worker.
  auto fd = source_.open_at(rel_path, O_RDONLY | O_NONBLOCK);
  if (!fd.is_ok()) {
    return fd.status();
  }
  auto st = cachestore::fstat_fd(fd.value().get(), rel_path);
  if (!st.is_ok()) {
    return st.status();
  }
  if (!S_ISREG(st.value().st_mode)) {
    return Status::error(S_ISDIR(st.value().st_mode) ? EISDIR : EINVAL, "open " + rel_path);
  }
  OpenFile file{std::move(fd).value(), FileVersion::of(st.value()), id, false};
  if (cache_) {
    registry_.observe(id, file.version, now_ns());
  }
  return file;
}

Result<OpenFile> Engine::open_file(const std::string& rel_path) {
  opens_.fetch_add(1, kRelaxed);
  if (!cache_) {
    return open_source(0, rel_path);
  }
  const FileId id = registry_.id_of(rel_path);
  auto version = current_version(id, rel_path);
  if (version.is_ok()) {
    if (auto fd = cache_->open_copy(id, version.value())) {
      hits_.fetch_add(1, kRelaxed);
      return OpenFile{std::move(*fd), version.value(), id, true};
    }
  }
  // A failed version check (the source unreachable, or the file gone) is answered by opening
  // the source, which reports the real error to this reader alone. The copy stays: an
  // unreachable source is not a deleted one.
  misses_.fetch_add(1, kRelaxed);
  auto file = open_source(id, rel_path);
  if (file.is_ok()) {
    stage_in_background(file.value(), rel_path);
  }
  return file;
}

void Engine::stage_in_background(const OpenFile& file, const std::string& rel_path) {
  // The copy reads through its own descriptor of the same open file: positioned reads do not
  // disturb the reader, and no second open reaches the source.
  if (!stager_) {
    return;
  }
  UniqueFd dup(::fcntl(file.fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) {
    copies_dropped_.fetch_add(1, kRelaxed);
    return;
  }
  auto job = [this, id = file.id, path = rel_path, version = file.version,
              fd = std::make_shared<UniqueFd>(std::move(dup))]() mutable {
    stage(id, path, std::move(*fd), version);
  };
  if (!stager_->try_submit(std::move(job))) {
    copies_dropped_.fetch_add(1, kRelaxed);
  }
}

void Engine::stage(FileId id, const std::string& rel_path, UniqueFd fd,
                   const FileVersion& version) {
  auto staging = cache_->begin_staging(id, rel_path, static_cast<uint64_t>(version.size));
  if (!staging) {
    return;
  }
  bool cache_fault = false;
  auto hash = cachestore::copy_into(fd.get(), *staging, &cache_fault);
  if (!hash.is_ok()) {
    cachestore::log(cachestore::LogLevel::kDebug, "staging %s: %s", rel_path.c_str(),
                    hash.status().to_string().c_str());
    cache_->abort(std::move(*staging), cache_fault ? hash.error_code() : 0);
    return;
  }
  // A copy that raced a change of the source is discarded, never published.
  auto after = cachestore::fstat_fd(fd.get(), rel_path);
  if (!after.is_ok() || !(FileVersion::of(after.value()) == version)) {
    cache_->abort(std::move(*staging), 0);
    return;
  }
  Status committed = cache_->commit(std::move(*staging), version, hash.value());
  if (!committed.is_ok()) {
    cachestore::log(cachestore::LogLevel::kDebug, "%s", committed.to_string().c_str());
  }
}

void Engine::close_file(const OpenFile& file) {
  if (file.from_cache) {
    cache_->unpin(file.id);
  }
}

void Engine::count_read(const OpenFile& file, uint64_t bytes) {
  (file.from_cache ? bytes_from_cache_ : bytes_from_source_).fetch_add(bytes, kRelaxed);
}

cachestore::VerifyReport Engine::verify_cache() {
  return cache_ ? cache_->verify_all() : cachestore::VerifyReport{};
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.opens = opens_.load(kRelaxed);
  s.hits = hits_.load(kRelaxed);
  s.misses = misses_.load(kRelaxed);
  s.bytes_from_cache = bytes_from_cache_.load(kRelaxed);
  s.bytes_from_source = bytes_from_source_.load(kRelaxed);
  s.source_stats = source_stats_.load(kRelaxed);
  s.copies_dropped = copies_dropped_.load(kRelaxed);
  s.files_known = registry_.size();
  s.copies_queued = stager_ ? stager_->pending() : 0;
  s.cache_enabled = cache_ != nullptr;
  if (cache_) {
    s.cache = cache_->stats();
    s.cache_dir = cache_->path();
  }
  return s;
}

}  // namespace epochfs::prefetch
