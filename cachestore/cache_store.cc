#include "cachestore/cache_store.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>

#include <xxhash.h>

#include "cachestore/index_file.h"
#include "cachestore/log.h"
#include "cachestore/root_dir.h"

namespace epochfs::cachestore {
namespace {

// How long staging stays off after a cache-disk fault before it is tried again. Short for a
// full disk (space comes back as files are evicted or others delete theirs), longer for I/O
// errors (a sick disk should not be hammered).
constexpr int64_t kNoSpaceBackoffNs = 2'000'000'000;
constexpr int64_t kIoErrorBackoffNs = 30'000'000'000;

bool is_no_space(int err) { return err == ENOSPC || err == EDQUOT; }

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
      watch_(static_cast<int64_t>(options.stuck_io_s * 1e9)) {
  MutexLock lock(mu_);
  policy_ = std::move(policy);
}

void CacheStore::set_policy(std::unique_ptr<EvictionPolicy> policy) {
  MutexLock lock(mu_);
  policy_ = std::move(policy);
}

bool CacheStore::contains(FileId id) const {
  MutexLock lock(mu_);
  return entries_.count(id) != 0;
}

std::optional<FileVersion> CacheStore::ready_version(FileId id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kReady || it->second.doomed) {
    return std::nullopt;
  }
  return it->second.version;
}

CacheStore::~CacheStore() {
  if (options_.keep) {
    save_index();
  }
}

// The index is written only at a clean shutdown and deleted as soon as it is read: after a
// crash there is no index, and nothing unverified is ever trusted.
void CacheStore::save_index() {
  std::vector<KeptCopy> copies;
  {
    MutexLock lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (e.state == State::kReady && !e.doomed) {
        copies.push_back(KeptCopy{e.path, e.size, e.version, e.hash});
      }
    }
  }
  const std::string text = format_index(copies);
  const std::string temp = std::string(CacheDir::kIndexName) + ".tmp";
  UniqueFd fd(::openat(dir_->fd(), temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() ||
      ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::renameat(dir_->fd(), temp.c_str(), dir_->fd(), CacheDir::kIndexName) != 0) {
    log(LogLevel::kWarning, "cache: cannot write the index of %s; the next mount starts empty",
        dir_->path().c_str());
    return;
  }
  log(LogLevel::kInfo, "cache: kept %zu copies in %s", copies.size(), dir_->path().c_str());
}

void CacheStore::load_index() {
  std::string text;
  {
    UniqueFd fd(::openat(dir_->fd(), CacheDir::kIndexName, O_RDONLY | O_CLOEXEC));
    char buf[65536];
    ssize_t n;
    while (fd.valid() && (n = ::read(fd.get(), buf, sizeof(buf))) > 0) {
      text.append(buf, static_cast<size_t>(n));
    }
  }
  ::unlinkat(dir_->fd(), CacheDir::kIndexName, 0);
  auto copies = parse_index(text);
  if (!copies) {
    log(LogLevel::kWarning, "cache: the kept index in %s is damaged; starting empty",
        dir_->path().c_str());
    copies.emplace();
  }
  // Keep what the index vouches for and is still there whole; remove everything else
  // (temporary files of a copy cut short, copies the index does not know).
  std::unordered_map<std::string, KeptCopy> wanted;
  for (auto& c : *copies) {
    wanted.emplace(CacheDir::object_name(c.path), std::move(c));
  }
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir_->path(), ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it.depth() == 0) {
      continue;  // the lock file and the fan-out directories
    }
    const std::string name = std::filesystem::relative(it->path(), dir_->path()).string();
    auto w = wanted.find(name);
    if (w != wanted.end() && it->file_size(ec) == w->second.size) {
      kept_.push_back(std::move(w->second));
      wanted.erase(w);
    } else {
      ::unlinkat(dir_->fd(), name.c_str(), 0);
    }
  }
}

void CacheStore::adopt(FileId id, const KeptCopy& copy) {
  const std::string name = CacheDir::object_name(copy.path);
  const uint64_t charge = charge_for(copy.size);
  {
    MutexLock lock(mu_);
    if (entries_.count(id) == 0 && used_bytes_ + charge <= options_.capacity_bytes) {
      used_bytes_ += charge;
      Entry e{State::kReady, false,        true,      0,    copy.size,
              charge,        copy.version, copy.hash, name, copy.path};
      entries_.emplace(id, std::move(e));
      policy_->inserted(id);
      return;
    }
  }
  ::unlinkat(dir_->fd(), name.c_str(), 0);  // no room under the capacity of this mount
}

uint64_t CacheStore::charge_for(uint64_t size) const {
  const uint64_t blocks = std::max<uint64_t>(1, (size + block_bytes_ - 1) / block_bytes_);
  return blocks * block_bytes_;
}

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
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.state == State::kReady && !it->second.doomed) {
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

void CacheStore::mark_removing(FileId id, Entry& e, std::vector<Removal>& out) {
  e.state = State::kRemoving;
  policy_->removed(id);
  out.push_back(Removal{id, e.name});
}

void CacheStore::finish_removals(const std::vector<Removal>& removals) {
  std::vector<FileId> gone;
  for (const auto& r : removals) {
    // Unlinking an open copy is safe: its reader keeps the inode until it closes. A copy that
    // cannot be unlinked still takes disk space, so it stays charged (kRemoving) for good.
    if (::unlinkat(dir_->fd(), r.name.c_str(), 0) == 0 || errno == ENOENT) {
      gone.push_back(r.id);
    } else {
      note_fault(errno);
    }
  }
  MutexLock lock(mu_);
  for (FileId id : gone) {
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.state == State::kRemoving) {
      used_bytes_ -= it->second.charge;
      entries_.erase(it);
    }
  }
}

// Charges `charge` for id, evicting unpinned ready files as needed. False if it cannot fit.
bool CacheStore::reserve(FileId id, const std::string& name, const std::string& path, uint64_t size,
                         uint64_t charge) {
  while (true) {
    const uint64_t capacity = effective_capacity();
    std::vector<Removal> removals;
    {
      MutexLock lock(mu_);
      if (entries_.count(id) != 0) {
        return false;
      }
      if (used_bytes_ + charge <= capacity) {
        used_bytes_ += charge;
        staging_bytes_ += charge;
        entries_.emplace(id,
                         Entry{State::kStaging, false, false, 0, size, charge, {}, 0, name, path});
        ++counters_.staging_now;
        return true;
      }
      // Called by choose_victim within this scope, with mu_ held.
      auto victim = policy_->choose_victim([this](FileId v) NO_THREAD_SAFETY_ANALYSIS {
        auto it = entries_.find(v);
        return it != entries_.end() && it->second.state == State::kReady && it->second.pins == 0;
      });
      if (!victim || charge > capacity) {
        ++counters_.skipped_no_room;
        return false;
      }
      if (!policy_->worth_evicting(id, *victim)) {
        ++counters_.bypassed;
        return false;
      }
      ++counters_.evictions;
      mark_removing(*victim, entries_.at(*victim), removals);
    }
    finish_removals(removals);
  }
}

Status CacheStore::create_temp(Staging& s) {
  const DiskWatch::Op op = watch_.begin();
  Status made = dir_->make_parents(s.final_name_);
  if (!made.is_ok()) {
    return made;
  }
  s.fd_.reset(
      ::openat(dir_->fd(), s.temp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  return s.fd_.valid() ? Status::ok() : Status::error(errno, "create " + s.temp_name_);
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
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.state != State::kReady || e.doomed) {
      // A copy being made fails at its commit, a removal finds nothing to unlink, and a
      // doomed copy was counted when it was found missing.
      ++it;
      continue;
    }
    ++lost;
    ++counters_.dropped_damaged;
    if (e.pins > 0) {
      e.doomed = true;  // dropped at its last unpin
      ++it;
      continue;
    }
    policy_->removed(it->first);
    used_bytes_ -= e.charge;
    it = entries_.erase(it);
  }
  return lost;
}

std::optional<Staging> CacheStore::begin_staging(FileId id, const std::string& path,
                                                 uint64_t size) {
  if (staging_suspended()) {
    return std::nullopt;
  }
  const std::string name = CacheDir::object_name(path);
  if (!reserve(id, name, path, size, charge_for(size))) {
    return std::nullopt;
  }
  Staging s;
  s.store_ = this;
  s.id_ = id;
  s.size_ = size;
  s.final_name_ = name;
  s.temp_name_ = temp_name_for(name);
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
  Entry& e = entries_.at(staging.id_);
  e.state = State::kReady;
  staging_bytes_ -= e.charge;
  e.version = version;
  e.hash = hash;
  --counters_.staging_now;
  ++counters_.files_staged;
  counters_.bytes_staged += e.size;
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
  auto it = entries_.find(staging.id_);
  if (it != entries_.end() && it->second.state == State::kStaging) {
    used_bytes_ -= it->second.charge;
    staging_bytes_ -= it->second.charge;
    entries_.erase(it);
    --counters_.staging_now;
    ++counters_.staging_aborted;
  }
}

void CacheStore::drop_locked(FileId id, bool damaged, std::vector<Removal>& out) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kReady) {
    return;
  }
  damaged ? ++counters_.dropped_damaged : ++counters_.dropped_stale;
  if (it->second.pins > 0) {
    it->second.doomed = true;
    return;
  }
  mark_removing(id, it->second, out);
}

namespace {

// Whether st is a copy of size bytes: a regular file (something put in its place, such as a
// FIFO or a device, is damage) of exactly that size.
bool is_object(const struct stat& st, uint64_t size) {
  return S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size;
}

}  // namespace

// Never follows a link put in a copy's place (it could lead out of the cache to a file of the
// same size), and never blocks on a FIFO put there (O_NONBLOCK changes nothing for a regular
// file).
UniqueFd CacheStore::open_object(const std::string& name) const {
  return UniqueFd(
      ::openat(dir_->fd(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
}

std::optional<UniqueFd> CacheStore::open_copy(FileId id, const FileVersion& version) {
  std::string name;
  uint64_t size = 0;
  std::vector<Removal> removals;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.state != State::kReady || it->second.doomed) {
      return std::nullopt;
    }
    if (it->second.version == version) {
      ++it->second.pins;
      policy_->accessed(id);
      name = it->second.name;
      size = it->second.size;
    } else {
      drop_locked(id, false, removals);
    }
  }
  if (name.empty()) {
    finish_removals(removals);
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
    auto it = entries_.find(id);
    // Not counted twice: the copy may have been counted already by remake_removed_dir.
    if (it != entries_.end() && !it->second.doomed) {
      it->second.doomed = true;
      ++counters_.dropped_damaged;
    }
  }
  unpin(id);
  return std::nullopt;
}

// A copy kept by an earlier mount is read whole and hashed once, at its first open, before it
// is served: the mount that wrote it did not fsync, and the disk may have changed since.
bool CacheStore::verify_copy(FileId id, int fd) {
  uint64_t expected;
  uint64_t size;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || !it->second.verify_pending) {
      return true;
    }
    expected = it->second.hash;
    size = it->second.size;
  }
  auto actual = hash_fd(fd, size);
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (actual.is_ok() && actual.value() == expected && it != entries_.end()) {
    it->second.verify_pending = false;
    return true;
  }
  return false;
}

VerifyReport CacheStore::verify_all() {
  std::vector<FileId> ids;
  {
    MutexLock lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (e.state == State::kReady && !e.doomed) {
        ids.push_back(id);
      }
    }
  }
  VerifyReport report;
  for (FileId id : ids) {
    std::string name;
    uint64_t size = 0;
    uint64_t expected = 0;
    {
      MutexLock lock(mu_);
      auto it = entries_.find(id);
      if (it == entries_.end() || it->second.state != State::kReady || it->second.doomed) {
        continue;  // evicted or dropped since the list was made
      }
      ++it->second.pins;  // not evicted while we read it
      name = it->second.name;
      size = it->second.size;
      expected = it->second.hash;
    }
    UniqueFd fd = open_object(name);
    struct stat st;
    bool good = fd.valid() && ::fstat(fd.get(), &st) == 0 && is_object(st, size);
    if (good) {
      auto actual = hash_fd(fd.get(), size);
      good = actual.is_ok() && actual.value() == expected;
    }
    {
      MutexLock lock(mu_);
      auto it = entries_.find(id);
      ++report.checked;
      report.bytes += size;
      if (!good && it != entries_.end()) {
        it->second.doomed = true;
        ++counters_.dropped_damaged;
        ++report.damaged;
      } else if (it != entries_.end()) {
        it->second.verify_pending = false;
      }
    }
    if (!good) {
      log(LogLevel::kWarning, "cache: copy %s is damaged; dropped", name.c_str());
    }
    unpin(id);  // removes the copy if it was found damaged
  }
  return report;
}

void CacheStore::unpin(FileId id) {
  std::vector<Removal> removals;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.pins == 0) {
      return;
    }
    if (--it->second.pins == 0 && it->second.doomed) {
      mark_removing(id, it->second, removals);
    }
  }
  finish_removals(removals);
}

void CacheStore::drop(FileId id, bool damaged) {
  std::vector<Removal> removals;
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
  s.files_ready = policy_->size();
  return s;
}

// --- Copying ---------------------------------------------------------------------------------

namespace {

// Reads the first size bytes of fd in 256 KiB chunks (a typical ~110 KB sample in one read),
// hashes them with XXH3-64 and hands each chunk to sink. A read error, or the file ending
// early (EIO), stops it; so does a sink error.
Result<uint64_t> hash_chunks(int fd, uint64_t size,
                             const std::function<Status(const char*, size_t)>& sink) {
  // Per copy thread, not zero-filled (a vector's would be): only the pages a copy touches
  // become resident, so 128 threads copying 100 kB files keep ~13 MiB, not 32 (the soak
  // benchmark's finding).
  constexpr size_t kChunk = 256 << 10;
  thread_local std::unique_ptr<char[]> buf(new char[kChunk]);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  Status failure;
  for (uint64_t off = 0; off < size && failure.is_ok();) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    const ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      failure = Status::error(n < 0 ? errno : EIO, "read");
      break;
    }
    XXH3_64bits_update(state, buf.get(), static_cast<size_t>(n));
    failure = sink(buf.get(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!failure.is_ok()) {
    return failure;
  }
  return hash;
}

}  // namespace

Result<uint64_t> hash_fd(int fd, uint64_t size) {
  return hash_chunks(fd, size, [](const char*, size_t) { return Status::ok(); });
}

Result<uint64_t> copy_into(int source_fd, Staging& staging, bool* cache_fault,
                           const std::function<void()>& progress) {
  *cache_fault = false;
  return hash_chunks(source_fd, staging.size(), [&](const char* data, size_t len) {
    const DiskWatch::Op op = staging.watch_io();
    Status written = write_all(staging.fd(), std::string_view(data, len), "cache copy");
    *cache_fault = !written.is_ok();
    if (written.is_ok() && progress) {
      progress();
    }
    return written;
  });
}

}  // namespace epochfs::cachestore
