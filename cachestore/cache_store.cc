// CacheStore: admission and eviction under the capacity, staging a copy and committing it,
// opening a ready copy for a reader. Kept copies are in cache_store_kept.cc, disk faults in
// cache_store_faults.cc, verify in cache_store_verify.cc, the copying itself in copy.cc.
#include "cachestore/cache_store.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>

#include "cachestore/copy.h"
#include "cachestore/log.h"
#include "cachestore/root_dir.h"

namespace epochfs::cachestore {
namespace {

std::string temp_name_for(const std::string& final_name) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return final_name + ".tmp." + std::to_string(rng() % 1000000000);
}

}  // namespace

// --- Staging ---------------------------------------------------------------------------------

Staging::~Staging() {
  if (store_ != nullptr) {
    store_->abort(std::move(*this), 0);
  }
}

Staging::Staging(Staging&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      id_(other.id_),
      size_(other.size_),
      fd_(std::move(other.fd_)),
      temp_name_(std::move(other.temp_name_)),
      final_name_(std::move(other.final_name_)) {}

Staging& Staging::operator=(Staging&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) {
      store_->abort(std::move(*this), 0);
    }
    store_ = std::exchange(other.store_, nullptr);
    id_ = other.id_;
    size_ = other.size_;
    fd_ = std::move(other.fd_);
    temp_name_ = std::move(other.temp_name_);
    final_name_ = std::move(other.final_name_);
  }
  return *this;
}

DiskWatch::Op Staging::watch_io() const {
  return store_ != nullptr ? store_->watch_io() : DiskWatch::Op();
}

// --- CacheStore ------------------------------------------------------------------------------

Result<std::unique_ptr<CacheStore>> CacheStore::open(const CacheOptions& options,
                                                     std::unique_ptr<EvictionPolicy> policy) {
  auto dir = CacheDir::create(options.root, options.source_key, options.keep);
  if (!dir.is_ok()) {
    return dir.status();
  }
  auto fs = dir.value()->statfs();
  // Charge in the filesystem's allocation unit; 4 KiB if it reports none.
  const uint64_t block = fs.is_ok() && fs.value().f_frsize > 0 ? fs.value().f_frsize : 4096;
  const bool adopted = dir.value()->adopted();
  auto store = std::unique_ptr<CacheStore>(
      new CacheStore(options, std::move(dir).value(), std::move(policy), block));
  if (adopted) {
    store->load_index();
  }
  return store;
}

CacheStore::CacheStore(const CacheOptions& options, std::unique_ptr<CacheDir> dir,
                       std::unique_ptr<EvictionPolicy> policy, uint64_t block_bytes)
    : options_(options),
      dir_(std::move(dir)),
      block_bytes_(block_bytes),
      watch_(static_cast<int64_t>(options.stuck_io_s * 1e9)),
      dev_null_(::open("/dev/null", O_WRONLY | O_CLOEXEC)) {
  MutexLock lock(mu_);
  policy_ = std::move(policy);
}

void CacheStore::set_policy(std::unique_ptr<EvictionPolicy> policy) {
  MutexLock lock(mu_);
  policy_ = std::move(policy);
}

bool CacheStore::contains(FileId id) const {
  MutexLock lock(mu_);
  return entries_.contains(id);
}

std::optional<uint64_t> CacheStore::entry_bytes(FileId id) const {
  MutexLock lock(mu_);
  const Entry* e = entries_.find(id);
  return e == nullptr ? std::nullopt : std::optional<uint64_t>(e->size());
}

std::vector<bool> CacheStore::contains_each(const std::vector<FileId>& ids) const {
  std::vector<bool> found(ids.size());
  MutexLock lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    found[i] = entries_.contains(ids[i]);
  }
  return found;
}

bool CacheStore::has_ready(FileId id, const FileVersion& version) const {
  MutexLock lock(mu_);
  const Entry* e = entries_.find(id);
  return e != nullptr && e->state() == State::kReady && !e->doomed && e->is_of(version);
}

CacheStore::~CacheStore() {
  if (options_.keep) {
    save_index();
  }
}

uint64_t CacheStore::charge_for(uint64_t size) const {
  const uint64_t blocks = std::max<uint64_t>(1, (size + block_bytes_ - 1) / block_bytes_);
  return blocks * block_bytes_;
}

void CacheStore::mark_removing(FileId id, Entry& e, std::vector<FileId>& out) {
  e.set_state(State::kRemoving);
  policy_->removed(id);
  out.push_back(id);
}

void CacheStore::finish_removals(const std::vector<FileId>& removals) {
  std::vector<FileId> gone;
  for (const FileId id : removals) {
    // Unlinking an open copy is safe: its reader keeps the inode until it closes. A copy that
    // cannot be unlinked (or named: never, while the registry keeps its promise) still takes
    // disk space, so it stays charged (kRemoving) for good.
    const std::string name = object_name_of(id);
    if (name.empty()) {
      continue;
    }
    if (::unlinkat(dir_->fd(), name.c_str(), 0) == 0 || errno == ENOENT) {
      gone.push_back(id);
    } else {
      note_fault(errno);
    }
  }
  MutexLock lock(mu_);
  for (FileId id : gone) {
    const Entry* e = entries_.find(id);
    if (e != nullptr && e->state() == State::kRemoving) {
      used_bytes_ -= charge_for(e->size());
      erase_entry_locked(id);
    }
  }
}

// Charges for a copy of size bytes for id, evicting unpinned ready files as needed (if
// may_evict). False if it cannot fit.
bool CacheStore::reserve(FileId id, uint64_t size, bool may_evict) {
  const uint64_t charge = charge_for(size);
  while (true) {
    const uint64_t capacity = effective_capacity();
    std::vector<FileId> removals;
    {
      MutexLock lock(mu_);
      if (entries_.contains(id)) {
        return false;
      }
      const bool too_big = size > Entry::kMaxBytes || charge > capacity;
      if (used_bytes_ + charge <= capacity && !too_big) {
        used_bytes_ += charge;
        staging_bytes_ += charge;
        entries_.insert(id, Entry(State::kStaging, size, 0, 0, false));
        ++counters_.copies_in_flight;
        return true;
      }
      if (!may_evict || too_big) {
        ++counters_.skipped_no_room;
        return false;
      }
      // Called by choose_victim within this scope, with mu_ held.
      auto victim = policy_->choose_victim([this](FileId v) NO_THREAD_SAFETY_ANALYSIS {
        const Entry* e = entries_.find(v);
        return e != nullptr && e->state() == State::kReady && e->pins == 0;
      });
      if (!victim) {
        ++counters_.skipped_no_room;
        return false;
      }
      if (!policy_->worth_evicting(id, *victim)) {
        ++counters_.bypassed;
        return false;
      }
      ++counters_.evictions;
      mark_removing(*victim, *entries_.find(*victim), removals);
    }
    finish_removals(removals);
  }
}

std::optional<Staging> CacheStore::begin_staging(FileId id, uint64_t size, bool may_evict) {
  if (staging_suspended()) {
    return std::nullopt;
  }
  if (!reserve(id, size, may_evict)) {
    return std::nullopt;
  }
  Staging s;
  s.store_ = this;
  s.id_ = id;
  s.size_ = size;
  // Named once the entry holds the id: a release of its path that raced this start either
  // came first (no name: given up) or saw the entry (keep_names).
  s.final_name_ = object_name_of(id);
  if (s.final_name_.empty()) {
    abort(std::move(s), 0);
    return std::nullopt;
  }
  s.temp_name_ = temp_name_for(s.final_name_);
  Status made = create_temp(s);
  if (!made.is_ok() && made.error_code() == ENOENT && remake_removed_dir()) {
    made = create_temp(s);
  }
  if (!made.is_ok()) {
    const int err = made.error_code();
    s.temp_name_.clear();  // nothing to unlink
    abort(std::move(s), err);
    return std::nullopt;
  }
  return s;
}

Status CacheStore::create_temp(Staging& s) {
  const DiskWatch::Op op = watch_.begin();
  // Readable too: a copy joined from a file's blocks is hashed from it (Staging::fd).
  const auto create = [&] {
    s.fd_.reset(
        ::openat(dir_->fd(), s.temp_name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    return s.fd_.valid();
  };
  // The fan-out directory exists for all but a cache's first few hundred copies: asked for
  // only when the create says it is missing (a mkdir per copy was ~3% of a copy's CPU).
  if (create()) {
    return Status::ok();
  }
  if (errno != ENOENT) {
    return Status::error(errno, "create " + s.temp_name_);
  }
  Status made = dir_->make_parents(s.final_name_);
  if (!made.is_ok()) {
    return made;
  }
  return create() ? Status::ok() : Status::error(errno, "create " + s.temp_name_);
}

Status CacheStore::commit(Staging staging, const FileVersion& version, uint64_t hash) {
  int err = 0;
  {
    const DiskWatch::Op op = watch_.begin();
    staging.fd_.reset();
    if (::renameat(dir_->fd(), staging.temp_name_.c_str(), dir_->fd(),
                   staging.final_name_.c_str()) != 0) {
      err = errno;
    }
  }
  if (err != 0) {
    // The directory removed under the copy (a cleaner, an `rm -rf` of the cache) is not a
    // failing disk: make it again now rather than pause staging as for an I/O fault.
    const bool removed = err == ENOENT && dir_->removed();
    if (removed) {
      (void)remake_removed_dir();
    }
    abort(std::move(staging), removed ? 0 : err);
    return Status::error(err, "rename into " + dir_->path());
  }
  staging.store_ = nullptr;  // committed: the destructor must not abort
  MutexLock lock(mu_);
  // Only abort() erases an entry being staged, and the Staging owns it until then.
  Entry& e = *entries_.find(staging.id_);
  e.set_state(State::kReady);
  staging_bytes_ -= charge_for(e.size());
  e.bytes = static_cast<uint64_t>(version.size);
  e.version = version.digest();
  e.hash = hash;
  --counters_.copies_in_flight;
  ++counters_.files_staged;
  counters_.bytes_staged += e.size();
  policy_->inserted(staging.id_);
  return Status::ok();
}

void CacheStore::abort(Staging staging, int err) {
  staging.store_ = nullptr;
  staging.fd_.reset();
  if (!staging.temp_name_.empty()) {
    ::unlinkat(dir_->fd(), staging.temp_name_.c_str(), 0);
  }
  if (err != 0) {
    note_fault(err);
  }
  MutexLock lock(mu_);
  const Entry* e = entries_.find(staging.id_);
  if (e != nullptr && e->state() == State::kStaging) {
    used_bytes_ -= charge_for(e->size());
    staging_bytes_ -= charge_for(e->size());
    erase_entry_locked(staging.id_);
    --counters_.copies_in_flight;
    ++counters_.copies_aborted;
  }
}

void CacheStore::drop_locked(FileId id, bool damaged, std::vector<FileId>& out) {
  Entry* e = entries_.find(id);
  if (e == nullptr || e->state() != State::kReady) {
    return;
  }
  damaged ? ++counters_.dropped_damaged : ++counters_.dropped_stale;
  if (e->pins > 0) {
    e->doomed = true;
    return;
  }
  mark_removing(id, *e, out);
}

bool CacheStore::is_object(const struct stat& st, uint64_t size) {
  return S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size;
}

// Never follows a link put in a copy's place (it could lead out of the cache to a file of the
// same size), and never blocks on a FIFO put there (O_NONBLOCK changes nothing for a regular
// file).
UniqueFd CacheStore::open_object(const std::string& name) const {
  return UniqueFd(
      ::openat(dir_->fd(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
}

std::optional<UniqueFd> CacheStore::open_copy(FileId id, const FileVersion& version) {
  bool pinned = false;
  uint64_t size = 0;
  std::vector<FileId> removals;
  {
    MutexLock lock(mu_);
    Entry* e = entries_.find(id);
    if (e == nullptr || e->state() != State::kReady || e->doomed) {
      return std::nullopt;
    }
    if (e->is_of(version)) {
      if (!e->pin()) {
        return std::nullopt;  // kMaxPins readers have it open: this one reads the source
      }
      policy_->accessed(id);
      pinned = true;
      size = e->size();
    } else {
      drop_locked(id, false, removals);
    }
  }
  if (!pinned) {
    finish_removals(removals);
    return std::nullopt;
  }
  const std::string name = object_name_of(id);
  if (name.empty()) {
    unpin(id);
    return std::nullopt;
  }
  // The copy must still be what we wrote: present and of the right size. The content hash is
  // recorded at staging but not re-read here: that would read every hit twice.
  UniqueFd fd;
  struct stat st;
  bool present;
  {
    const DiskWatch::Op op = watch_.begin();
    fd = open_object(name);
    if (!fd.valid() && (errno == EMFILE || errno == ENFILE || errno == ENOMEM)) {
      // Out of descriptors or memory: the daemon's state, not the copy's. The copy stays.
      log(LogLevel::kWarning, "cache: cannot open copy %s now: %s", name.c_str(),
          error_text(errno).c_str());
      unpin(id);
      return std::nullopt;
    }
    present = fd.valid() && ::fstat(fd.get(), &st) == 0 && is_object(st, size);
  }
  if (present && verify_copy(id, fd.get())) {
    return fd;
  }
  log(LogLevel::kWarning, "cache: copy %s is missing or damaged; refetching", name.c_str());
  {
    MutexLock lock(mu_);
    Entry* e = entries_.find(id);
    // Not counted twice: the copy may have been counted already by remake_removed_dir.
    if (e != nullptr && !e->doomed) {
      e->doomed = true;
      ++counters_.dropped_damaged;
    }
  }
  unpin(id);
  return std::nullopt;
}

void CacheStore::unpin(FileId id) {
  std::vector<FileId> removals;
  {
    MutexLock lock(mu_);
    Entry* e = entries_.find(id);
    if (e == nullptr || e->pins == 0) {
      return;
    }
    if (--e->pins == 0 && e->doomed) {
      mark_removing(id, *e, removals);
    }
  }
  finish_removals(removals);
}

void CacheStore::drop(FileId id, bool damaged) {
  std::vector<FileId> removals;
  {
    MutexLock lock(mu_);
    drop_locked(id, damaged, removals);
  }
  finish_removals(removals);
}

CacheStats CacheStore::stats() const {
  MutexLock lock(mu_);
  CacheStats s = counters_;
  s.capacity_bytes = options_.capacity_bytes;
  s.used_bytes = used_bytes_;
  s.files_cached = policy_->size();
  s.read_ahead = read_aheads_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace epochfs::cachestore
