// Engine: the front door of the data path, between the FUSE layer and the cache store.
//
// fusefs asks the engine for a file's data and never touches the cache directly, so that
// version checks, staging and progress tracking each live in one place.
//
// open_file, the read-through path:
//   1. Tell the planner (progress tracking: the open may advance a stream's cursor).
//   2. Find the source's current version: trusted from a lookup/getattr within the attribute
//      timeout (or ever, with --immutable), else one stat of the source.
//   3. A ready cached copy of exactly that version: serve it (pinned until close_file).
//   4. A copy of the file in flight (prefetch or another reader's): wait for it, then serve it.
//   5. Otherwise serve the reader from the source at once, and hand a copy to the stager: it
//      copies from the same open file into the cache in the background, and publishes the copy
//      only if the source's version did not change during the copy.
// A source error (EIO, ENOENT) reaches the reader that hit it and is never recorded in the
// cache; a failure of the cache only ever means reading from the source.
//
// Prefetch: the Planner picks the files ahead of each stream's cursor and calls prefetch();
// every copy, prefetch or demand, is registered as a flight, so one file is copied once and
// readers wait for that copy instead of reading the source a second time. A file the planner
// passes that is already cached is stat'ed on the stager instead (stat_ahead), so that its
// lookup (and a stat() of it) answers from fresh attributes (fresh_attributes) without a round
// trip to the source.
//
// Shutdown order: the planner (no more prefetches), the stager (joins its threads, so no copy
// touches the cache afterwards), the cache store (removes the mount's cache directory), and
// the planner object last (the cache's eviction policy asks it for next uses).
//
// Thread-safety: all methods may be called concurrently from FUSE worker threads.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "cachestore/cache_store.h"
#include "cachestore/root_dir.h"
#include "cachestore/status.h"
#include "cachestore/unique_fd.h"
#include "prefetch/blocks.h"
#include "prefetch/copy_concurrency.h"
#include "prefetch/engine_stats.h"
#include "prefetch/file_registry.h"
#include "prefetch/flights.h"
#include "prefetch/fresh_attrs.h"
#include "prefetch/grace.h"
#include "prefetch/held_fds.h"
#include "prefetch/id_batches.h"
#include "prefetch/latency_histogram.h"
#include "prefetch/order_upload.h"
#include "prefetch/order_watch.h"
#include "prefetch/planner.h"
#include "prefetch/recent_ids.h"
#include "prefetch/rights_checked.h"
#include "prefetch/source_guard.h"
#include "prefetch/stager.h"
#include "prefetch/user_rate.h"

namespace epochfs::prefetch {

struct EngineOptions {
  // The source never changes while mounted: cached copies need no version check.
  bool immutable = false;
  // A version read from the source this recently is trusted at open.
  double attr_timeout_s = 1.0;
  // Copies in flight at once. Network storage is latency-bound: many reads in flight.
  unsigned stage_threads = 128;
  // Copies queued or running; beyond this a copy is dropped (the reader is served anyway).
  unsigned max_pending_copies = 4096;
  // How far ahead of each stream's cursor to stage (--lookahead).
  Lookahead lookahead;
  // A reader waits at most this long for a copy in flight before reading the source itself,
  // and gives up sooner on a copy that has neither read nor written for stuck_copy_s with the
  // cache disk hung, or for source.timeout_s in a call to the source (Engine::wait_for_flight):
  // waiting on it would stall the trainer for nothing.
  double max_wait_s = 30;
  double stuck_copy_s = 2;
  // A shuffle file outside the mount, published again at each new version (--shuffle-file).
  std::string shuffle_file;
  // What one job or user may hold, and when a quiet job ends (prefetch/jobs.h).
  JobLimits limits;
  // Entries a stream's opens may come out of its order (--reorder-window).
  uint64_t reorder_window = Schedule::kDefaultReorderWindow;
  // Bounds on calls into the source, and its outages (prefetch/source_guard.h).
  SourceGuardOptions source;
  // While the source is down, files with a copy of the version last checked are served it
  // (stale-if-error; always, with immutable). False: they fail like the others (--outage fail).
  bool serve_cached_in_outage = true;
  // Whether the kernel reads cached copies itself now (passthrough), asked of the mount: a
  // file a range order names is then better read from a whole copy than block by block
  // through the daemon (Engine::join_blocks). Null: never.
  bool (*kernel_reads)() = nullptr;
};

// The reads of one open of a file read by blocks (prefetch/blocks.h): its path, kept so that
// a READ asks the registry only for its block's id, and where the last READ ended.
struct BlockReads {
  explicit BlockReads(std::string p) : path(std::move(p)) {}

  const std::string path;  // the file's, relative: its blocks' keys are made from it
  std::atomic<uint64_t> last_end{UINT64_MAX};
};

// A file opened for reading.
struct OpenFile {
  cachestore::UniqueFd fd;
  cachestore::FileVersion version;  // the version fd reads
  FileId id = 0;
  bool from_cache = false;  // pinned in the cache until Engine::close_file
  int stream = -1;          // the stream whose order the open advanced, if any
  // Named by a range order: fd is the source's, and reads go block by block
  // (Engine::read_blocks); null otherwise.
  std::shared_ptr<BlockReads> blocks = nullptr;
};

class Engine final : public PrefetchSink {
 public:
  // source must outlive the engine. cache may be null: then every read goes to the source.
  Engine(const cachestore::RootDir& source, std::unique_ptr<cachestore::CacheStore> cache,
         EngineOptions options);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the staging threads. Separate from construction because the daemon forks after
  // the engine is built, and threads do not survive a fork. Without start(), misses are not
  // staged.
  void start();

  // The source paths given an id (files_known); the inode table keeps its paths here too.
  FileRegistry& registry() { return registry_; }

  // The mount is gone (its session ended): the cache directory is given up at once, ahead of
  // the teardown (CacheStore::unmounted).
  void unmounted() {
    if (cache_) {
      cache_->unmounted();
    }
  }

  // Records attributes just read from the source (by lookup or getattr).
  void observe(const std::string& rel_path, const struct stat& st);

  // The source's attributes of rel_path (lstat), through the guard: while the source is down,
  // the attributes last read of a directory, or of a file with a copy of that version, are
  // answered instead (when the mount serves the cache in an outage).
  cachestore::Result<struct stat> source_attributes(const std::string& rel_path);

  // Calls into the source for a FUSE worker (prefetch/source_guard.h): bounded, interruptible.
  SourceGuard& source_guard() { return guard_; }

  // size bytes at off of fd, file's source file, read through the guard (a read that cannot
  // hang the reader unkillably). Fewer only at the end of the file.
  cachestore::Result<std::string> read_source(const OpenFile& file, int fd, size_t size, off_t off);

  // rel_path's attributes if the engine read them from the source within the attribute
  // timeout (ever, with --immutable), ahead of the trainer: a lookup or getattr may answer
  // from them instead of asking the source (prefetch/fresh_attrs.h).
  std::optional<struct stat> fresh_attributes(const std::string& rel_path);

  // Opens a regular file for reading, from the cache if a valid copy exists.
  // EISDIR/EINVAL for anything that is not a regular file.
  // opener: the user opening it; only their streams (and the mount's) follow the open.
  cachestore::Result<OpenFile> open_file(const std::string& rel_path,
                                         std::optional<uid_t> opener = std::nullopt);

  // The reader is done with file.
  void close_file(const OpenFile& file);

  // size bytes at off of file, a file read by blocks (OpenFile::blocks): each block from its
  // cached copy, waiting for one in flight, else from the source (and then copied into the
  // cache). A read of another block than the last counts as a use of that block in reader's
  // streams; a read spanning two, of the block holding its middle. Fewer bytes only at the
  // end of the file.
  cachestore::Result<std::string> read_blocks(const OpenFile& file, size_t size, off_t off,
                                              std::optional<uid_t> reader);

  // A read within one block whose copy is ready, for the caller to read from the copy's fd
  // into its own buffer (read_blocks allocates and zeroes one per READ, and a kernel readahead
  // READ of a small sample is 128 KiB): the copy, held open until the slice goes, and where
  // the bytes are in it. The read counts as a use of the
  // block as in read_blocks. nullopt: read_blocks serves it. REQUIRES: block_slice_done.
  struct BlockSlice {
    std::shared_ptr<const HeldFds::Held> copy;
    off_t off = 0;
    size_t len = 0;
  };

  std::optional<BlockSlice> block_slice(const OpenFile& file, size_t size, off_t off,
                                        std::optional<uid_t> reader);
  // The slice was read from its copy, to be sent next (counted now, so that a reader who asks
  // the stats after its read sees it), or (read false) its copy failed: the copy is dropped
  // as damaged and the caller reads with read_blocks instead.
  void block_slice_done(const BlockSlice& slice, bool read);

  // Reading file's cached copy failed (an I/O error, or the copy ended early): drops the copy
  // as damaged (call once per open), then source_instead_of_copy opens the source at the same
  // version for the rest of the reads: an error if the source changed meanwhile (its bytes
  // would not continue the version being read) or cannot be opened. file stays pinned until
  // close_file.
  void drop_failed_copy(const OpenFile& file);
  cachestore::Result<cachestore::UniqueFd> source_instead_of_copy(const OpenFile& file);

  // bytes were served to a reader of file (from the copy or the source, as it was opened).
  void count_read(const OpenFile& file, uint64_t bytes);
  // bytes were read for a reader of file from the source, whatever file's fd (a passthrough
  // open whose backing file is a source file).
  void count_source_read(const OpenFile& file, uint64_t bytes);

  EngineStats stats() const;

  // A new upload of an order or a manifest (a write into .epochfs/, or a watched file), by
  // publisher (its job owns what it publishes: prefetch/jobs.h).
  std::unique_ptr<OrderUpload> begin_upload(OrderUpload::Kind kind, Publisher publisher);

  // PrefetchSink, for the planner.
  unsigned prefetch_slots() override;
  bool prefetch(FileId id, size_t stream) override;
  // Forgets the paths only ended jobs' orders named (engine_reclaim.cc).
  void reclaim() override;

  // A new epoch's window passes blocks read ahead for the last one less than a second ago:
  // their pages may be gone (a short epoch, a dropped page cache), so they are asked again.
  void published() override { read_ahead_recently_.forget(cachestore::now_ns()); }

  // What an operation that may hold a FileId holds a ticket of (prefetch/grace.h).
  Grace& grace() { return grace_; }

  // Checks every cached copy against its recorded hash (epochfs verify). Slow: reads the cache.
  cachestore::VerifyReport verify_cache();
  // The version last read from the source for id, or for a block its file's (prefetch/
  // blocks.h): what a kept copy is kept at, and whose pages go with a dropped copy.
  std::optional<cachestore::FileVersion> observed_version(FileId id) const;

  // The file a cached copy's id is of (for a block, its file; else id itself) and the version
  // the copy is kept at; nullopt if that file was never read from the source.
  struct CopyOf {
    FileId file;
    cachestore::FileVersion version;
  };

  std::optional<CopyOf> copy_of(FileId id) const;

  // Watches one read of an open cached copy, so that a cache disk that stops answering sends
  // later opens to the source (see cachestore::DiskWatch).
  cachestore::DiskWatch::Op watch_copy_read();

 private:
  cachestore::Result<cachestore::FileVersion> current_version(FileId id,
                                                              const std::string& rel_path);
  // Opens rel_path in the source; guarded: through the guard (a reader waits on it).
  cachestore::Result<OpenFile> open_source(FileId id, const std::string& rel_path, bool guarded);
  // The attributes to answer for id while the source is down, if the mount may answer.
  std::optional<struct stat> known_attributes(FileId id);

  bool may_answer_in_outage() const {
    return options_.immutable || options_.serve_cached_in_outage;
  }

  // Copies file into the cache on the stager. REQUIRES: the caller owns file.id's flight.
  // True if the copy job took the flight over (it ends it); false if the caller still owns it.
  bool stage_in_background(const OpenFile& file, const std::string& rel_path);
  // Copies fd, the source file at file_version, into id's cache object: whole, or only block
  // (prefetch/blocks.h), whose key rel_path then is. False if reading the source failed.
  bool stage(FileId id, const std::string& rel_path, int fd,
             const cachestore::FileVersion& file_version,
             std::optional<uint64_t> block = std::nullopt);
  void prefetch_copy(FileId id, size_t stream, const std::string& rel_path);
  // A prefetch copy's open of the source file (id file, at rel_path). shared: a block's, one
  // open for every copy of the file's blocks (block_sources_), made again once older than
  // kSourceHeldNs; else the copy's own.
  cachestore::Result<std::shared_ptr<const HeldFds::Held>> copy_source(FileId file,
                                                                       const std::string& rel_path,
                                                                       bool shared);
  // A file named by a range order, opened: from its whole copy if the kernel reads copies
  // itself and one of the source's version is ready, else from the source, read block by block.
  cachestore::Result<OpenFile> open_block_file(FileId id, const std::string& rel_path);

  // EngineOptions::kernel_reads, asked now.
  bool kernel_reads() const { return options_.kernel_reads != nullptr && options_.kernel_reads(); }

  // An open of a file read by blocks ends: if the kernel would read a whole copy itself, the
  // file has none, and was not tried just before (join_tried_), joins its blocks into one on
  // the stager (join_blocks).
  void join_when_whole(const OpenFile& file);
  // Makes id's whole copy of version from its blocks' ready copies, without evicting anything
  // for it: nothing if a block is not ready, or there is no free room for a second copy. A
  // join that found no room or failed is not tried again for 10 s (join_refused_).
  void join_blocks(FileId id, const std::string& rel_path, const cachestore::FileVersion& version);
  // Drops a copy that failed for why, logged at debug with what was being done; a fault of the
  // cache's own disk (cache_fault) is passed on with its errno (CacheStore::abort).
  void drop_staging(cachestore::Staging staging, const cachestore::Status& why, bool cache_fault,
                    const char* doing, const std::string& rel_path);
  // Whether block's file has a whole copy its block readers read instead (open_block_file):
  // reading the block's copy ahead would be a disk read nobody uses.
  bool read_whole(FileId block);
  // len bytes at off of block of file, which holds them all, into out; a part of READ use.
  cachestore::Status read_block(const OpenFile& file, uint64_t block, uint64_t off, size_t len,
                                std::optional<uid_t> reader, const BlockUse& use, char* out);
  // id's (block's) ready copy of version, kept open for the reads that follow (block_copies_)
  // and read ahead whole (CacheStore::read_ahead) once a second at most; null if none is ready.
  std::shared_ptr<const HeldFds::Held> held_copy(FileId id, const cachestore::FileVersion& version);
  // From id's (block's) ready copy of version; false if none is ready or it failed.
  bool read_copy(FileId id, uint64_t block, const cachestore::FileVersion& version, uint64_t off,
                 size_t len, char* out);
  // Copies block (id) of file into the cache on the stager, from a descriptor of its own.
  // REQUIRES: the caller owns id's flight; true if the job took it over.
  bool stage_block_in_background(const OpenFile& file, FileId id, const std::string& key,
                                 uint64_t block);
  // An entry of stream's order names id, cached already: checked on the stager with its
  // publisher's rights, unless they were confirmed before (prefetch/rights_checked.h). A
  // block's copy of at least 256 KiB is then read ahead (reads_ahead_queue_), never for a
  // publisher who may not read its file.
  void check_cached_entry(FileId id, size_t stream, uint64_t bytes);
  // Queues id's copy to be read ahead, unless it was within the last second.
  void read_ahead(FileId id);
  // Whether reader may read rel_path (id); if not, stream's entry is rejected as a missing
  // file's is, so that its counters cannot tell the two apart.
  bool may_stage_for(FileId id, size_t stream, const Credentials& reader,
                     const std::string& rel_path);
  // Stats cached file id on the stager, so that its lookup finds the attributes fresh.
  void stat_ahead(FileId id);
  // Queues id on queue, and starts a stager job at priority that calls drain if the queue asks
  // for one (prefetch/id_batches.h).
  void queue_for_job(IdBatches& queue, FileId id, Stager::Priority priority,
                     void (Engine::*drain)());
  // A stager job: reads the queued copies into memory (CacheStore::read_in), a batch at a
  // time, until none is left.
  void drain_reads_ahead();
  // A stager job: stats the queued files, a batch at a time, until none is left.
  void drain_stats_ahead();
  // True if id's attributes, read less than half the timeout ago, will still be fresh at its
  // open.
  bool fresh_for_open(FileId id);
  // The oldest read of the source an open or lookup trusts now.
  int64_t trusted_since_ns() const;
  // Attributes of id read from the source at read_at_ns: kept in the registry (outages,
  // --immutable) and, for a file, among the fresh ones (opens and lookups within the timeout).
  void note_attributes(FileId id, const struct stat& st, int64_t read_at_ns);
  // The version an open of id may trust without asking the source, if any.
  std::optional<cachestore::FileVersion> trusted_version(FileId id);
  void count_open(const OpenFile& file, const OpenOutcome& outcome);
  // A copy ended (made or not) latency_ns after it began: the histogram and the planner.
  void copy_finished(int64_t latency_ns, uint64_t bytes);

  // Waits for id's copy if one is in flight (Flights::wait; a stuck one is counted and
  // logged); adds the time waited to *stall_ns.
  Flights::Wait wait_for_flight(FileId id, uint64_t* stall_ns);
  // Whether rel_path names a file creds may read (an order's entry looked up as it is
  // published); nullopt if the source could not say.
  std::optional<bool> names_file(const std::string& rel_path, const Credentials& creds);
  // Charges upload's CPU time to uid (publish_cpu_), or refuses it at once if uid has used
  // its share.
  void meter_cpu(OrderUpload& upload, uid_t uid);
  // The two steps of reclaim: a batch of candidates to release (how many left the list for
  // good: released, or pinned), released ids to recycle.
  size_t release_candidates();
  void recycle_released();
  // Spends cpu_ns of reclaiming from the publishing share of the users of uids, one share per
  // id.
  void charge_reclaim(const std::vector<uid_t>& uids, int64_t cpu_ns);
  // Whether a copy (in flight, or in the cache) holds each id: one hold of each lock.
  std::vector<bool> copies_hold(const std::vector<FileId>& ids);

  // An id released, and by whom its record's charge is held, until it is recycled.
  struct Released {
    FileId id;
    uid_t uid;
    uint64_t epoch;  // the grace epoch it was released in
  };

  // Dependencies, in destruction order reversed: the stager goes first, the planner last.
  const cachestore::RootDir& source_;
  const EngineOptions options_;
  Grace grace_;  // outlives everything holding tickets
  std::unique_ptr<Planner> planner_;
  std::unique_ptr<cachestore::CacheStore> cache_;
  std::unique_ptr<HeldFds> block_copies_;  // with the cache: open copies of blocks
  static constexpr size_t kSourcesHeld = 16;
  static constexpr int64_t kSourceHeldNs = 1'000'000'000;
  HeldFds block_sources_{kSourcesHeld, nullptr, kSourceHeldNs};  // source files' opens
  FileRegistry registry_;
  FreshAttrs fresh_;
  RightsChecked rights_checked_;
  IdBatches stats_ahead_queue_{16};
  // Blocks to read into memory ahead of their reads (check_cached_entry, held_copy): a block
  // is read at random, a READ of 128 KiB at most per page fault, each a disk read of its own
  // while the copy's pages are cold. A whole file is read whole once opened, and asking ahead
  // for it only cost the daemon CPU a warm DataLoader epoch lacks. Once a second per block at
  // most (an order names one up to 16 times an epoch, and a reader reads it as often); at
  // most 4,096 queued; by two jobs at most, each reading one block at a time
  // (CacheStore::read_in), so that the disk's queue never holds the window's blocks in front
  // of the reader's own reads (benchmarks.md, "Single-file datasets").
  IdBatches reads_ahead_queue_{16, 4096, 2};
  static constexpr int64_t kReadAheadWindowNs = 1'000'000'000;  // the "once a second" above
  RecentIds read_ahead_recently_{kReadAheadWindowNs};           // blocks the planner passed
  RecentIds read_recently_{kReadAheadWindowNs};                 // blocks read (held_copy)
  // Files join_when_whole tried in the last 0.2 s: a scan of a file's blocks is bounded to five
  // a second, and a reader's short opens at its start (a header read) do not hide the close
  // at the end of its epoch.
  RecentIds join_tried_{200'000'000};
  // Files whose blocks were all ready but whose join found no free room or failed in the last
  // 10 s: not scanned again meanwhile.
  RecentIds join_refused_{10'000'000'000};
  Flights flights_;                   // copies in progress, one per file (prefetch/flights.h)
  CopyConcurrency copy_concurrency_;  // how many prefetch copies may be in flight
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<OrderWatch> watch_;  // publishes into the planner: goes first
  SourceGuard guard_;                  // last: its threads may call into the planner (replan)
  UserLedger uploads_;                 // memory of uploads being written, by user
  UserLedger paths_;                   // memory of the paths users' orders registered
  // Look-ups in the source as users publish (names_file): 64 at once, then 16 a second, each.
  UserRate look_ups_{16, 64};
  // The CPU time, in ms, each user's uploads may take of the daemon's (JobLimits).
  UserRate publish_cpu_;
  std::deque<Released> released_;  // the planning thread's only (reclaim), as is:
  int64_t last_reclaim_ns_ = 0;
  std::atomic<uint64_t> paths_released_{0};

  // Counters. Relaxed: independent statistics, read as a snapshot.
  std::atomic<uint64_t> opens_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> bytes_from_cache_{0};
  std::atomic<uint64_t> bytes_from_source_{0};
  std::atomic<uint64_t> source_stats_{0};
  std::atomic<uint64_t> stats_ahead_{0};
  std::atomic<uint64_t> fresh_lookups_{0};
  std::atomic<uint64_t> copies_dropped_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> stall_ns_{0};
  std::atomic<uint64_t> waits_abandoned_{0};
  std::atomic<uint64_t> prefetches_{0};
  std::atomic<uint64_t> block_hits_{0};    // block reads served from a cached copy
  std::atomic<uint64_t> block_misses_{0};  // and from the source
  std::atomic<uint64_t> block_waits_{0};   // block reads that waited for a copy in flight
  std::atomic<uint64_t> block_stall_ns_{0};
  std::atomic<uint64_t> joined_copies_{0};  // whole copies joined from blocks (join_blocks)
  std::atomic<uint64_t> joined_bytes_{0};
  LatencyHistogram open_latency_;
  LatencyHistogram copy_latency_;
};

}  // namespace epochfs::prefetch
