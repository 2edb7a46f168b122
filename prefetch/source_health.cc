// SourceGuard, continued: the source's health as the guard's calls find it (ok, slow, down),
// its changes logged, and the snapshot the stats show (prefetch/source_guard.h).
#include <time.h>

#include "cachestore/log.h"
#include "prefetch/source_guard.h"

namespace epochfs::prefetch {

using cachestore::LogLevel;
using cachestore::MutexLock;
using cachestore::now_ns;
using cachestore::Status;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

const char* to_string(SourceState state) {
  switch (state) {
    case SourceState::kOk:
      return "ok";
    case SourceState::kSlow:
      return "slow";
    case SourceState::kDown:
      return "down";
  }
  return "?";
}

void SourceGuard::note(const Status& status, const std::string& path) {
  if (is_outage_error(status.error_code())) {
    mark_down(status.to_string(), path);
  }
}

void SourceGuard::note_duration(int64_t ns) {
  // Slow: a call took over a fifth of --source-timeout.
  const bool slow = ns > static_cast<int64_t>(options_.timeout_s / 5 * 1e9);
  SourceState expected = slow ? SourceState::kOk : SourceState::kSlow;
  if (state_.compare_exchange_strong(expected, slow ? SourceState::kSlow : SourceState::kOk)) {
    MutexLock lock(mu_);
    since_ns_ = now_ns();
    since_wall_s_ = time(nullptr);
  }
}

void SourceGuard::mark_down(const std::string& why, const std::string& path) {
  {
    MutexLock lock(mu_);
    last_error_ = why + (path.empty() ? std::string() : " (" + path + ")");
    if (state_.exchange(SourceState::kDown) == SourceState::kDown) {
      return;
    }
    since_ns_ = now_ns();
    since_wall_s_ = time(nullptr);
    ++outages_;
  }
  cachestore::log(LogLevel::kWarning,
                  "the source is down (%s): cached files are served from the cache, other "
                  "reads wait for it up to %g s",
                  why.c_str(), options_.outage_wait_s);
}

void SourceGuard::mark_up() {
  double seconds;
  {
    MutexLock lock(mu_);
    if (state_.load() != SourceState::kDown) {
      return;
    }
    seconds = static_cast<double>(now_ns() - since_ns_) / 1e9;
    since_ns_ = now_ns();
    since_wall_s_ = time(nullptr);
    state_.store(SourceState::kOk);
  }
  cachestore::log(LogLevel::kInfo,
                  "the source answers again after %.1f s (answers from the cache %llu, calls "
                  "that waited %llu, failed %llu, since the mount)",
                  seconds, static_cast<unsigned long long>(served_known_.load(kRelaxed)),
                  static_cast<unsigned long long>(waited_.load(kRelaxed)),
                  static_cast<unsigned long long>(failed_.load(kRelaxed)));
  if (on_recovery_) {
    on_recovery_();
  }
  wake();
}

SourceHealth SourceGuard::health() const {
  SourceHealth h;
  h.state = state_.load();
  h.served_known = served_known_.load(kRelaxed);
  h.waited = waited_.load(kRelaxed);
  h.failed = failed_.load(kRelaxed);
  h.timed_out = timed_out_.load(kRelaxed);
  h.interrupted = interrupted_.load(kRelaxed);
  MutexLock lock(mu_);
  h.since_ns = since_ns_;
  h.since_wall_s = since_wall_s_;
  h.outages = outages_;
  h.last_error = last_error_;
  h.hung_paths = hung_.size();
  return h;
}

}  // namespace epochfs::prefetch
