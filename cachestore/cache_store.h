// CacheStore: whole-file copies of source files on local disk, bounded and always correct.
// The front door of the cachestore module.
//
// Goal: serve later reads of a file from local disk, never exceed the byte capacity, and
// never serve a partial, stale or damaged copy.
//
// Entries, keyed by the dense FileId the prefetch engine assigns:
//   (absent) --begin_staging--> kStaging --commit--> kReady --evict/drop--> kRemoving --> absent
//                                   \--abort--> absent
// kStaging holds a reservation: capacity is charged before the first byte is copied, so the
// sum of charges (ready + staging + being removed) is at most the capacity at every moment,
// however many copies run at once. A charge is the file's size rounded up to the cache
// filesystem's block size, at least one block, since disk usage (what du shows) is what must
// stay under the cap, and small files dominate training sets.
//
// Staging writes a temporary file next to its final name, renames it into place, then marks
// the entry ready: a reader never sees a partial file. Nothing is fsync'ed: the cache is
// disposable (dropped at unmount), and an fsync per file would cap staging at the disk's sync
// rate.
//
// Readers pin entries (open_copy .. unpin); eviction skips pinned entries, so the disk space
// of an open copy is never counted as free. A copy found stale (version differs) or damaged
// (missing, wrong size) is dropped; if pinned, it is removed when the last reader unpins.
//
// Room is made by asking the EvictionPolicy for victims. A victim moves to kRemoving (still
// charged), is unlinked with no lock held, and only then uncharged; a copy whose unlink fails
// stays charged, since its blocks are still on the disk.
//
// Cache-disk faults (ENOSPC, EDQUOT, EIO, EROFS) while staging suspend staging for a while;
// reads fall back to the source, which the caller does on any nullopt.
//
// Thread-safety: every public method may be called from any thread. mu_ is held for index and
// accounting work only, never across a syscall. The eviction policy runs under it and may take
// its oracle's lock (the planner's), which therefore never calls into the store while held.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachestore/cache_dir.h"
#include "cachestore/disk_watch.h"
#include "cachestore/eviction_policy.h"
#include "cachestore/file_version.h"
#include "cachestore/id_table.h"
#include "cachestore/kept_versions.h"
#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

struct CacheOptions {
  std::string root;                      // --cache-dir
  std::string source_key;                // the source's absolute path
  uint64_t capacity_bytes = UINT64_MAX;  // --cache-size
  double reserve_fraction = 0.05;        // --cache-reserve: free space kept on the cache fs
  bool keep = false;                     // --keep-cache: keep copies for the next mount
  double stuck_io_s = 2.0;               // a call on the cache disk this old: the disk hangs
};

// A copy kept by an earlier mount (--keep-cache), as its index recorded it.
struct KeptCopy {
  std::string path;  // source path relative to the root
  uint64_t size = 0;
  FileVersion version;
  uint64_t hash = 0;
};

// Counters since the mount. Plain values; a snapshot.
struct CacheStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // charged: ready + staging + being removed
  uint64_t files_cached = 0;
  uint64_t copies_in_flight = 0;
  uint64_t files_staged = 0;
  uint64_t bytes_staged = 0;
  uint64_t copies_aborted = 0;  // source changed or unreadable during the copy
  uint64_t evictions = 0;
  uint64_t dropped_stale = 0;
  uint64_t dropped_damaged = 0;
  uint64_t skipped_no_room = 0;     // staging refused: everything pinned or too big
  uint64_t bypassed = 0;            // staging refused: needed later than anything cached
  uint64_t skipped_suspended = 0;   // staging refused: suspended after a cache-disk fault
  uint64_t hung_disk_bypasses = 0;  // opens of ready copies served from the source: disk hung
  uint64_t read_ahead = 0;          // copies read in, or asked for, ahead of their reads
  uint64_t errors_no_space = 0;     // ENOSPC, EDQUOT
  uint64_t errors_io = 0;           // EIO, EROFS and any other cache-disk error
  // The verify under way (or the last one): copies done with (checked, or gone meanwhile) of
  // those it set out to check.
  uint64_t verify_checked = 0;
  uint64_t verify_total = 0;
};

// What a verification of every copy found.
struct VerifyReport {
  uint64_t checked = 0;  // copies read whole and hashed
  uint64_t bytes = 0;
  uint64_t damaged = 0;  // missing, wrong size or wrong hash: dropped
  // The files whose copies were dropped: pages the kernel read from them may be damaged too,
  // and the mount invalidates them.
  std::vector<FileId> dropped;
};

class CacheStore;

// A copy in progress: a temporary file in the cache directory and a capacity reservation.
// Move-only; abandoning it (destruction without commit) aborts the copy.
class Staging {
 public:
  Staging() = default;
  ~Staging();
  Staging(Staging&& other) noexcept;
  Staging& operator=(Staging&& other) noexcept;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  FileId id() const { return id_; }

  // The temporary file, open for reading and writing.
  int fd() const { return fd_.get(); }

  uint64_t size() const { return size_; }

  // Watches one call on the cache disk made for this copy (see DiskWatch).
  DiskWatch::Op watch_io() const;

 private:
  friend class CacheStore;

  CacheStore* store_ = nullptr;
  FileId id_ = 0;
  uint64_t size_ = 0;
  UniqueFd fd_;
  std::string temp_name_;
  std::string final_name_;
};

class CacheStore {
 public:
  static Result<std::unique_ptr<CacheStore>> open(const CacheOptions& options,
                                                  std::unique_ptr<EvictionPolicy> policy);
  ~CacheStore();
  CacheStore(const CacheStore&) = delete;
  CacheStore& operator=(const CacheStore&) = delete;

  // Replaces the eviction policy. Call once, before any other method (the policy may depend on
  // objects built after the store).
  void set_policy(std::unique_ptr<EvictionPolicy> policy);

  // What the engine's registry knows of file ids: the path, which names the copy (entries
  // keep no name) and goes in the index a kept cache writes at the end, and the version last
  // seen, for that index (entries keep a hash of their copy's version, not the version; a copy
  // of another version is not kept). Call once, before any other method: without it nothing
  // is staged. Both are called with no lock of the store's held. REQUIRES: an id's path
  // neither changes nor goes while the id has an entry (contains), but for a release that
  // raced the start of its copy, which the releaser reports (keep_names).
  using PathOf = std::function<std::string(FileId)>;
  using VersionOf = std::function<std::optional<FileVersion>(FileId)>;

  void set_names(PathOf path_of, VersionOf version_of) {
    path_of_ = std::move(path_of);
    version_of_ = std::move(version_of);
  }

  // Paths of ids that path_of no longer gives: the registry released them, and a copy may have
  // been starting meanwhile (a READ of a block finds its id without pinning it). Each is kept
  // while its id has an entry, so the copy can still be found and removed; ids with none are
  // passed over. Under one hold of the lock.
  using NamedIds = std::vector<std::pair<FileId, std::string>>;
  void keep_names(const NamedIds& released);

  // Whether id has an entry (being staged, ready or being removed); for many ids, under one
  // hold of the lock.
  bool contains(FileId id) const;
  // The size of id's copy, if it has an entry (as contains).
  std::optional<uint64_t> entry_bytes(FileId id) const;
  std::vector<bool> contains_each(const std::vector<FileId>& ids) const;
  // Whether id has a ready copy of exactly `version`.
  bool has_ready(FileId id, const FileVersion& version) const;

  // A ready copy of id at exactly `version`, pinned, as an fd to read; nullopt on a miss, or
  // if Entry::kMaxPins readers have the copy open. A copy of another version is dropped. REQUIRES:
  // unpin(id) once the reader is done.
  std::optional<UniqueFd> open_copy(FileId id, const FileVersion& version);
  void unpin(FileId id);
  // Reads id's ready copy into the page cache, for a reader to come, and returns once it is
  // there: not an access (the eviction policy is not told), and nothing while the disk hangs.
  // Synchronous, so that callers ahead of a reader queue one copy each on the disk, not an
  // epoch's worth in front of the reader's own reads. Counted in read_ahead.
  void read_in(FileId id);
  // Starts reading a copy open already (fd, `bytes` long) into the page cache: advice, which
  // returns at once; counted in read_ahead.
  void read_ahead(int fd, uint64_t bytes);

  // Whether an open of id should skip the cache because a call on the cache disk has been
  // stuck for stuck_io_s (see DiskWatch): the reader then reads the source. Counts the opens
  // of files with a ready copy (of any version: it is not read to tell).
  bool bypass_hung_disk(FileId id);

  // Watches one call on the cache disk made outside the store (a read of an open copy).
  DiskWatch::Op watch_io() { return watch_.begin(); }

  // Starts a copy of id (`size` bytes): reserves capacity, evicting unpinned files if needed
  // (unless !may_evict), and creates the temporary file. nullopt if id has no path, is already
  // cached or staging, it is not worth what it would evict, there is no room, or staging is
  // suspended.
  std::optional<Staging> begin_staging(FileId id, uint64_t size, bool may_evict = true);

  // Publishes a finished copy of `version` with content hash `hash`.
  Status commit(Staging staging, const FileVersion& version, uint64_t hash);

  // Abandons a copy. err: the cache-disk errno that stopped it (suspends staging for ENOSPC,
  // EDQUOT, EIO, EROFS), or 0 when the source changed or failed.
  void abort(Staging staging, int err);

  // Drops id's copy because the source changed, or (damaged) because reading it failed.
  void drop(FileId id, bool damaged = false);

  // Copies an earlier mount kept (--keep-cache) whose files are present with the recorded size.
  // Each is served only after adopt() and a hash check at its first open. Call once, before
  // any other method.
  std::vector<KeptCopy> take_kept_copies() {
    MutexLock lock(mu_);
    kept_versions_.expect(kept_.size());
    return std::move(kept_);
  }

  // Enters a kept copy as ready for id, charged, to be verified at first open. A copy that no
  // longer fits the capacity is removed instead. REQUIRES: copy.path is id's path (PathOf).
  void adopt(FileId id, const KeptCopy& copy);

  // Reads every ready copy whole and checks it against the hash recorded when it was made;
  // drops (and counts as damaged) every copy that is missing, of the wrong size or hash.
  // Runs in the caller's thread; readers go on meanwhile.
  VerifyReport verify_all();

  CacheStats stats() const;

  // Whether some call on the cache disk has run longer than stuck_io_s (DiskWatch); logs when
  // it changes.
  bool disk_hung();

  const std::string& path() const { return dir_->path(); }

  // Starts removing what dead mounts of other sources left on the cache disk (CacheDir); call
  // after the daemon's fork, as threads do not survive it.
  void start_cleanup() const { dir_->start_background_removal(); }

  // The mount is gone: a cache that is not kept gives its directory up now (CacheDir::give_up),
  // before the daemon's teardown; the directory is removed when this is destroyed.
  void unmounted() { dir_->give_up(); }

 private:
  enum class State : uint8_t { kStaging, kReady, kRemoving };

  // 24 bytes: with a million copies, every field counts (docs/benchmarks.md, "Memory per
  // file").
  struct Entry {
    // A copy's size fits 44 bits (16 TiB); larger files are not cached whole.
    static constexpr uint64_t kMaxBytes = (uint64_t{1} << 44) - 1;
    // Readers of one copy at once; past this many, an open reads the source.
    static constexpr uint64_t kMaxPins = (uint64_t{1} << 16) - 1;

    Entry() = default;

    Entry(State s, uint64_t size, uint64_t digest, uint64_t content_hash, bool verify)
        : bytes(size),
          state_bits(static_cast<uint64_t>(s)),
          verify_pending(verify),
          version(digest),
          hash(content_hash) {}

    uint64_t bytes : 44 = 0;  // the copy's size (the source's at open while staging); charged
    uint64_t pins : 16 = 0;
    uint64_t state_bits : 2 = 0;
    uint64_t doomed : 1 = 0;          // remove when the last pin goes
    uint64_t verify_pending : 1 = 0;  // kept by an earlier mount: check the hash at first open
    // The copy's source version, as FileVersion::digest; 0 while staging. Not the
    // FileVersion: 40 bytes, which the registry keeps already.
    uint64_t version = 0;
    uint64_t hash = 0;  // of the copy's content

    // No name, nor its 16-byte key: the copy's name is its path's (object_name_of), which the
    // registry keeps anyway.

    uint64_t size() const { return bytes; }

    State state() const { return static_cast<State>(state_bits); }

    void set_state(State s) { state_bits = static_cast<uint64_t>(s); }

    // Takes a pin; false if the copy has kMaxPins already.
    bool pin() {
      if (pins == kMaxPins) {
        return false;
      }
      ++pins;
      return true;
    }

    // The size too, though the digest covers it: a copy of another size is never served.
    bool is_of(const FileVersion& v) const {
      return v.valid() && static_cast<uint64_t>(v.size) == bytes && version == v.digest();
    }
  };

  static_assert(sizeof(Entry) == 24);

  CacheStore(const CacheOptions& options, std::unique_ptr<CacheDir> dir,
             std::unique_ptr<EvictionPolicy> policy, uint64_t block_bytes);

  uint64_t charge_for(uint64_t size) const;
  uint64_t effective_capacity();
  bool reserve(FileId id, uint64_t size, bool may_evict);
  // Moves id to kRemoving (still charged) and adds it to out, the copies to unlink once mu_
  // is released (finish_removals), then uncharge.
  void mark_removing(FileId id, Entry& e, std::vector<FileId>& out) REQUIRES(mu_);
  void finish_removals(const std::vector<FileId>& removals) EXCLUDES(mu_);
  // The name of id's copy in the cache directory; empty if id has no path (path_of_, else
  // keep_names'). Takes the registry's lock: never called with mu_ held.
  std::string object_name_of(FileId id) const EXCLUDES(mu_);
  // Forgets id's entry and what is kept beside it.
  void erase_entry_locked(FileId id) REQUIRES(mu_);
  void note_fault(int err);
  // Creates s's temporary file (and its fan-out directory).
  Status create_temp(Staging& s);
  // After an ENOENT: if this mount's directory was deleted underneath, makes it again and
  // forgets the copies that went with it. True if staging may be tried again.
  bool remake_removed_dir();
  // Forgets every ready copy (their directory is gone), counted as damaged; returns how many.
  size_t forget_ready_copies() EXCLUDES(mu_);
  bool staging_suspended();
  void drop_locked(FileId id, bool damaged, std::vector<FileId>& out) REQUIRES(mu_);
  bool verify_copy(FileId id, int fd);
  UniqueFd open_object(const std::string& name) const;
  // Whether st is a copy of size bytes: a regular file (something put in its place, such as a
  // FIFO or a device, is damage) of exactly that size.
  static bool is_object(const struct stat& st, uint64_t size);
  void load_index();
  void save_index();

  // Dependencies and constant data.
  const CacheOptions options_;
  const std::unique_ptr<CacheDir> dir_;
  const uint64_t block_bytes_;
  DiskWatch watch_;
  std::atomic<bool> hung_logged_{false};
  std::atomic<uint64_t> read_aheads_{0};  // CacheStats::read_ahead, counted with no lock
  const UniqueFd dev_null_;               // read_in's sink: opened once, not per block

  // Mutable state.
  mutable Mutex mu_;
  Mutex remake_mu_;  // one remake_removed_dir at a time; taken before mu_
  std::unique_ptr<EvictionPolicy> policy_ GUARDED_BY(mu_);
  PathOf path_of_;  // set before use: it names every copy
  VersionOf version_of_;
  // The versions of copies kept by an earlier mount and not yet opened (verify_pending): no
  // registry has seen their files yet, and the index a kept cache writes needs them.
  KeptVersions kept_versions_ GUARDED_BY(mu_);
  IdTable<Entry> entries_ GUARDED_BY(mu_);
  std::unordered_map<FileId, std::string> released_names_ GUARDED_BY(mu_);  // keep_names
  uint64_t used_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t staging_bytes_ GUARDED_BY(mu_) = 0;  // charged to copies in flight
  CacheStats counters_ GUARDED_BY(mu_);
  int64_t suspended_until_ns_ GUARDED_BY(mu_) = 0;
  // Filled by load_index() before any thread exists; handed out once.
  std::vector<KeptCopy> kept_;
};

}  // namespace epochfs::cachestore
