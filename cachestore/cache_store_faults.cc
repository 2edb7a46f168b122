// CacheStore, continued: a cache disk that fills up, fails, hangs or loses its directory. The
// capacity keeps the disk's free-space reserve; a fault pauses staging for a while (reads go
// to the source); a hung call bypasses the cache; a removed directory is made again.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "cachestore/cache_store.h"
#include "cachestore/log.h"

namespace epochfs::cachestore {
namespace {

// How long staging stays off after a cache-disk fault before it is tried again. Short for a
// full disk (space comes back as files are evicted or others delete theirs), longer for I/O
// errors (a sick disk should not be hammered).
constexpr int64_t kNoSpaceBackoffNs = 2'000'000'000;
constexpr int64_t kIoErrorBackoffNs = 30'000'000'000;

bool is_no_space(int err) { return err == ENOSPC || err == EDQUOT; }

}  // namespace

// The capacity, lowered so that the cache filesystem keeps its free-space reserve. A statvfs
// that reports no blocks (some FUSE and network filesystems) gives no information, so it
// does not shrink the capacity; inode counts are not used (f_files = 0 on btrfs, tmpfs).
uint64_t CacheStore::effective_capacity() {
  auto fs = dir_->statfs();
  uint64_t used;
  uint64_t unwritten;
  {
    MutexLock lock(mu_);
    used = used_bytes_;
    // Copies in flight are charged but not yet written: statvfs does not see them yet.
    unwritten = staging_bytes_;
  }
  if (!fs.is_ok() || fs.value().f_blocks == 0) {
    return options_.capacity_bytes;
  }
  const auto& st = fs.value();
  const uint64_t unit = st.f_frsize > 0 ? st.f_frsize : st.f_bsize;
  const uint64_t total = st.f_blocks * unit;
  const uint64_t avail = st.f_bavail * unit;
  const auto reserve =
      static_cast<uint64_t>(static_cast<double>(total) * options_.reserve_fraction);
  const uint64_t room = avail > reserve + unwritten ? avail - reserve - unwritten : 0;
  return std::min(options_.capacity_bytes, used + room);
}

bool CacheStore::disk_hung() {
  const bool hung = watch_.hung();
  // Read first: every open comes here, and an exchange each time would bounce the line.
  if (hung != hung_logged_.load(std::memory_order_relaxed) && hung != hung_logged_.exchange(hung)) {
    if (hung) {
      log(LogLevel::kWarning,
          "cache: a call on the cache disk has not returned for %.0f s; serving from the source "
          "and pausing staging until it does (%s)",
          options_.stuck_io_s, dir_->path().c_str());
    } else {
      log(LogLevel::kInfo, "cache: the cache disk answers again (%s)", dir_->path().c_str());
    }
  }
  return hung;
}

bool CacheStore::bypass_hung_disk(FileId id) {
  if (!disk_hung()) {
    return false;
  }
  MutexLock lock(mu_);
  const Entry* e = entries_.find(id);
  if (e != nullptr && e->state() == State::kReady && !e->doomed) {
    ++counters_.hung_disk_bypasses;
  }
  return true;
}

bool CacheStore::staging_suspended() {
  if (disk_hung()) {
    MutexLock lock(mu_);
    ++counters_.skipped_suspended;
    return true;
  }
  {
    MutexLock lock(mu_);
    if (suspended_until_ns_ == 0) {
      return false;
    }
    if (now_ns() < suspended_until_ns_) {
      ++counters_.skipped_suspended;
      return true;
    }
    suspended_until_ns_ = 0;
  }
  log(LogLevel::kInfo, "cache: staging resumed in %s", dir_->path().c_str());
  return false;
}

void CacheStore::note_fault(int err) {
  const bool no_space = is_no_space(err);
  bool first;
  {
    MutexLock lock(mu_);
    no_space ? ++counters_.errors_no_space : ++counters_.errors_io;
    first = suspended_until_ns_ == 0;
    suspended_until_ns_ = now_ns() + (no_space ? kNoSpaceBackoffNs : kIoErrorBackoffNs);
  }
  if (first) {
    log(LogLevel::kWarning, "cache: %s; serving from the source and pausing staging",
        Status::error(err, dir_->path()).to_string().c_str());
  }
}

bool CacheStore::remake_removed_dir() {
  MutexLock remaking(remake_mu_);
  if (!dir_->removed()) {
    return true;  // made again by another thread meanwhile
  }
  // Every copy went with the directory; they are forgotten before the new directory exists.
  // Done after it, a copy made in the new directory meanwhile (a staging that found it) would
  // be forgotten too, counted as lost and left there unaccounted.
  const size_t lost = forget_ready_copies();
  Status made = dir_->recreate();
  if (!made.is_ok()) {
    log(LogLevel::kWarning, "cache: %s was removed and cannot be made again: %s",
        dir_->path().c_str(), made.to_string().c_str());
    return false;
  }
  log(LogLevel::kWarning, "cache: %s was removed while mounted, with %zu copies; made it again",
      dir_->path().c_str(), lost);
  return true;
}

size_t CacheStore::forget_ready_copies() {
  size_t lost = 0;
  MutexLock lock(mu_);
  // Called by for_each within this scope, with mu_ held.
  entries_.for_each([&](FileId id, Entry& e) NO_THREAD_SAFETY_ANALYSIS {
    if (e.state() != State::kReady || e.doomed) {
      // A copy being made fails at its commit, a removal finds nothing to unlink, and a
      // doomed copy was counted when it was found missing.
      return;
    }
    ++lost;
    ++counters_.dropped_damaged;
    if (e.pins > 0) {
      e.doomed = true;  // dropped at its last unpin
      return;
    }
    policy_->removed(id);
    used_bytes_ -= charge_for(e.size());
    erase_entry_locked(id);
  });
  return lost;
}

}  // namespace epochfs::cachestore
