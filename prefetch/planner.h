// Planner: turns published orders into copies ahead of the trainer, and tells the cache how far
// in the future each file is needed.
//
// It owns the Schedule (prefetch/schedule.h) and the manifest, takes the trainer's progress
// from opens (on_open), and runs one planning thread that keeps each stream's lookahead window
// staged: soonest-needed first, streams served round-robin so each gets its share of the
// staging slots. Copies themselves are made by the PrefetchSink (the Engine), which
// deduplicates them against copies readers started and runs them on the Stager.
//
// The window (--lookahead): a fixed number of files, a byte budget (converted to files with
// the mean size of files staged so far), or auto: enough to cover the stream's consumption
// rate times the measured copy latency, twice over, and never more than half the cache.
//
// Lock order: CacheStore's lock, then mu_ (next_use is called by the eviction policy under the
// cache's lock). So nothing here calls the sink or the cache with mu_ held.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cachestore/eviction_policy.h"
#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "prefetch/block_readers.h"
#include "prefetch/jobs.h"
#include "prefetch/lookahead.h"
#include "prefetch/order_parser.h"
#include "prefetch/schedule.h"

namespace epochfs::prefetch {

// Where the planner sends the files to stage.
class PrefetchSink {
 public:
  virtual ~PrefetchSink() = default;

  // Between passes, on the planning thread: forgets what only ended orders named.
  virtual void reclaim() {}

  // Copies that may be started now.
  virtual unsigned prefetch_slots() = 0;
  // Starts a copy of id unless it is cached or in flight; true if a copy was started.
  virtual bool prefetch(FileId id, size_t stream) = 0;

  // An order was published (on the publisher's thread, no lock held).
  virtual void published() {}
};

struct PlannerOptions {
  Lookahead lookahead;
  unsigned stage_threads = 128;
  uint64_t cache_capacity = UINT64_MAX;
  JobLimits limits;
  uint64_t reorder_window = Schedule::kDefaultReorderWindow;
};

// One epoch of a stream, as it went.
struct EpochRecord {
  uint64_t epoch = 0;
  uint64_t length = 0;
  uint64_t opens = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t waits = 0;  // opens that waited for a copy in flight (then hits)
  uint64_t stall_ns = 0;
  uint64_t bytes_from_source = 0;
  uint64_t copies_started = 0;  // prefetch copies for this stream
  double seconds = 0;
};

// Adds from's counts and time to `to` (a stream's total over its epochs).
void add_record(EpochRecord& to, const EpochRecord& from);

struct StreamStats {
  Schedule::StreamView view;  // view.id: the schedule's key, unique over users and jobs
  std::string name;           // as the order named it (#stream)
  std::string job;
  uint64_t uid = 0;
  EpochRecord current;
  EpochRecord total;
  std::vector<EpochRecord> history;  // finished epochs, newest last, at most kHistory
  uint64_t rejected_entries = 0;
  uint64_t window_files = 0;
  double rate_files_s = 0;  // consumption rate
  double lead_s = 0;        // planned_ahead / rate
  double hit_rate_bound = 1;
  uint64_t restarts = 0;  // publishes of an epoch older than the current one
};

// Entries of an order looked up in the source as it was published (a few, spread over it): how
// many name a file its publisher may read. An order whose paths are relative to the wrong
// directory publishes fine and stages nothing; this says so at once.
struct EntrySample {
  uint64_t checked = 0;
  uint64_t found = 0;

  bool mostly_missing() const { return checked > 0 && 2 * found < checked; }
};

struct PublishReport {
  uid_t uid = 0;  // the publisher's
  bool ok = false;
  std::string message;  // one line: what was published, or why not
  std::string stream;
  uint64_t epoch = 0;
  uint64_t accepted = 0;
  RejectReport rejects;
  EntrySample sample;
};

struct PlannerStats {
  std::vector<StreamStats> streams;
  uint64_t publishes = 0;
  uint64_t publish_failures = 0;
  std::optional<PublishReport> last_publish;
  // Each user's latest verdict: a user's view of the stats shows only their own.
  std::map<uid_t, PublishReport> last_publish_by_user;
  uint64_t manifest_entries = 0;
  uint64_t schedule_entries = 0;
  uint64_t schedule_bytes = 0;
  uint64_t unscheduled_opens = 0;
  double copy_latency_s = 0;
  // Streams of users other than the viewer's, left out of a user's view of the stats.
  uint64_t streams_of_other_users = 0;
  uint64_t jobs = 0;        // jobs holding streams or manifests now
  uint64_t jobs_ended = 0;  // since the mount: their processes exited, or they went idle
  uint64_t publishes_over_limit = 0;
  // A planning pass is due or running: copies it hands out are not queued yet.
  bool planning = false;
};

// How an open was served, for the stream's counters.
struct OpenOutcome {
  bool hit = false;
  bool waited = false;
  uint64_t stall_ns = 0;
};

class Planner final : public cachestore::NextUseOracle {
 public:
  static constexpr size_t kHistory = 16;

  explicit Planner(PlannerOptions options);
  ~Planner() override;
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  // Starts the planning thread (after the daemon's fork). sink must outlive stop().
  void start(PrefetchSink* sink);
  void stop();

  // Publishes a parsed order (entries already mapped to file ids) into the job of publisher
  // that header names (prefetch/jobs.h). block_files: for an order of ranges, the files whose
  // blocks (prefetch/blocks.h) its entries are; their repeats are thinned rather than dropped,
  // and the publisher reads those files by blocks while the stream holds the order.
  PublishReport publish(const Publisher& publisher, const OrderHeader& header,
                        std::vector<FileId> entries, RejectReport rejects, EntrySample sample = {},
                        std::vector<FileId> block_files = {});
  // Publishes a manifest, header.manifest's (or "default") of its job: index i of an
  // index-form order names manifest.ids[i]. Entries rejected while parsing keep their index as
  // kNoFile. block_files: as for publish, for a manifest of ranges.
  PublishReport publish_manifest(const Publisher& publisher, const OrderHeader& header,
                                 Manifest manifest, RejectReport rejects,
                                 std::vector<FileId> block_files = {});
  static constexpr FileId kNoFile = UINT32_MAX;
  // Records (and logs) an upload that cannot be published; report.message says why.
  // over_limit: refused by a limit (counted in publishes_over_limit).
  PublishReport refuse(PublishReport report, bool over_limit = false);

  // Whether an upload of `entries` entries (a manifest's, or an order's) by publisher with this
  // header is within the limits now (prefetch/jobs.h); publish checks again. A refusal is
  // counted in publishes_over_limit.
  cachestore::Status admits(const Publisher& publisher, const OrderHeader& header, bool manifest,
                            uint64_t entries);

  // The manifest an index-form order of publisher with this header indexes (null if none)
  // and the files its entries are blocks of (empty for a manifest of whole files), read under
  // one hold of the lock so that both are of the same manifest.
  struct HeldManifest {
    std::shared_ptr<const Manifest> manifest;
    std::vector<FileId> block_files;
  };

  HeldManifest manifest(const Publisher& publisher, const OrderHeader& header) const;

  // Ends the jobs whose processes have all exited or that have been idle too long: their
  // streams and manifests go, and their copies become ordinary cache entries. The planning
  // thread calls it every second; tests may call it directly.
  void end_finished_jobs();

  // A reader (user opener, if known) opened id. The stream it advanced, if any: only a stream
  // of the opener's own jobs, or of the mount's (--shuffle-file).
  std::optional<size_t> on_open(FileId id, std::optional<uid_t> opener = std::nullopt);
  // A READ of bytes of block id of a file read by blocks; fresh if it does not continue the
  // reader's last READ of the file (Schedule::on_block_read).
  std::optional<size_t> on_block_read(FileId id, uint64_t bytes, bool fresh,
                                      std::optional<uid_t> opener);

  // An id an order's upload registered, and the user its path is charged to.
  struct Registered {
    FileId id = 0;
    uid_t uid = 0;
  };

  // The ids publisher's upload registered go to its job, which holds them until it ends; then
  // they are candidates for release. No such job (the upload was refused): candidates now.
  void hold_registered(const Publisher& publisher, const OrderHeader& header,
                       std::vector<FileId> ids);
  // Up to max candidates, taken off the list.
  std::vector<Registered> take_candidates(size_t max);
  // For each candidate no live order or manifest holds: release(id) (FileRegistry::
  // release_unpinned), under the planner's lock so that no publish adds the id between the
  // look and the release; its outcome goes to *done. The others go back on the list.
  using Release = std::function<std::optional<size_t>(FileId)>;
  void release_unheld(const std::vector<Registered>& candidates, const Release& release,
                      std::vector<std::pair<Registered, std::optional<size_t>>>* done);
  // Puts candidates back on the list, to be looked at after every other one.
  void return_candidates(const std::vector<Registered>& candidates);
  // Whether a live order or manifest holds id; for many ids, under one lock.
  bool order_holds(FileId id);
  std::vector<bool> orders_hold(const std::vector<FileId>& ids);

  // Whether opener reads id by blocks now (prefetch/block_readers.h).
  bool reads_by_blocks(FileId id, std::optional<uid_t> opener) const {
    return block_readers_.reads_by_blocks(id, opener);
  }

  void count_open(size_t stream, const OpenOutcome& outcome);
  void count_source_bytes(size_t stream, uint64_t bytes);
  void count_copy_started(size_t stream);
  // A copy finished (prefetch or demand): feeds the latency and size estimates.
  void copy_finished(int64_t latency_ns, uint64_t bytes);
  // A prefetch ended, copied or not (an entry rejected, an order replaced): its slot is free,
  // so the next pass runs now rather than at the idle poll.
  void slot_freed();
  // A scheduled file could not be staged because it is not a readable regular file.
  void reject_entry(size_t stream, const std::string& path, const std::string& why);
  // The rights stream's entries are staged with: its job's latest publisher's. None if the
  // stream is gone.
  std::shared_ptr<const Credentials> reader_of(size_t stream) const;
  // The source is back after an outage: plans every stream again from its position, so that
  // the files whose copies failed meanwhile are staged (the cached ones cost a stat ahead).
  void replan();

  uint64_t next_use(FileId id) override;
  bool repeats(FileId id) override;
  bool this_epoch_only(FileId id) override;

  PlannerStats stats() const;

 private:
  struct Rate {
    int64_t window_start_ns = 0;
    uint64_t window_count = 0;
    double per_s = 0;
  };

  void run();
  void plan_pass();
  void end_job(Job& job) REQUIRES(mu_);
  bool holds_locked(FileId id) REQUIRES(mu_);
  // Counts manifest's ids (delta +1) or stops counting them (-1) in manifest_refs_.
  void count_manifest(const std::vector<FileId>& manifest, int delta) REQUIRES(mu_);
  // What job's stream or manifest (key: "stream NAME", "manifest NAME") now reads by blocks,
  // in place of what it did.
  void set_block_files(Job& job, const std::string& key, std::vector<FileId> files) REQUIRES(mu_);
  // Entries users' jobs hold: uid's, or every user's (nullopt). The mount's own jobs aside.
  uint64_t entries_held(std::optional<uid_t> uid) const REQUIRES(mu_);
  cachestore::Status admission(const Job& job, const OrderHeader& header, bool manifest,
                               uint64_t entries) const REQUIRES(mu_);
  void reset_stream(size_t stream) REQUIRES(mu_);
  // The job publisher's upload belongs to, or a refusal in *report.
  Job* job_of(const Publisher& publisher, const OrderHeader& header, PublishReport* report)
      REQUIRES(mu_);
  // entries placed in job's stream as its order: refused (why) with no job (job_of's refusal),
  // over a limit, or by the schedule.
  cachestore::Result<Schedule::Published> place(Job* job, const OrderHeader& header,
                                                const std::string& stream,
                                                std::vector<FileId> entries,
                                                const std::vector<uint32_t>& uses,
                                                const std::string& why) REQUIRES(mu_);
  std::optional<size_t> matched(std::optional<Schedule::Match> match) REQUIRES(mu_);
  // The stream's stats follow what the schedule did with a published order: a new stream
  // starts them, a restart closes its history.
  void follow_published(Job& job, const Schedule::Published& p, const std::string& stream)
      REQUIRES(mu_);
  // The staging window of a stream (prefetch/lookahead.h), from what has been measured.
  WindowInputs window_inputs(size_t stream) const REQUIRES(mu_);
  uint64_t window_for(size_t stream) const REQUIRES(mu_);
  void note_rejects(size_t stream, const RejectReport& rejects) REQUIRES(mu_);
  void finish_epoch(size_t stream, int64_t now) REQUIRES(mu_);
  PublishReport record(PublishReport report) REQUIRES(mu_);

  const PlannerOptions options_;

  mutable cachestore::Mutex mu_;
  cachestore::CondVar wake_{&mu_};
  Schedule schedule_ GUARDED_BY(mu_);
  Jobs jobs_ GUARDED_BY(mu_);
  std::vector<Job*> stream_job_ GUARDED_BY(mu_);  // by schedule slot; null if free
  // By slot: an open used up the current epoch; it ends once that open is counted, and with
  // it every open matched to the epoch before it (uncounted_: matched, not yet counted).
  std::vector<bool> finish_after_count_ GUARDED_BY(mu_);
  std::vector<uint32_t> uncounted_ GUARDED_BY(mu_);
  std::vector<StreamStats> streams_ GUARDED_BY(mu_);
  std::vector<Rate> rates_ GUARDED_BY(mu_);
  std::vector<int64_t> epoch_started_ns_ GUARDED_BY(mu_);
  uint64_t publishes_ GUARDED_BY(mu_) = 0;
  uint64_t publish_failures_ GUARDED_BY(mu_) = 0;
  std::optional<PublishReport> last_publish_ GUARDED_BY(mu_);
  std::map<uid_t, PublishReport> last_publish_by_user_ GUARDED_BY(mu_);
  uint64_t unscheduled_opens_ GUARDED_BY(mu_) = 0;
  uint64_t jobs_ended_ GUARDED_BY(mu_) = 0;
  uint64_t publishes_over_limit_ GUARDED_BY(mu_) = 0;
  int64_t last_sweep_ns_ GUARDED_BY(mu_) = 0;
  double copy_latency_s_ GUARDED_BY(mu_) = 0;
  double mean_file_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t copies_measured_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  BlockReaders block_readers_;  // its lock is a leaf: taken under mu_
  // By id: the live manifests' entries naming it (saturated at the top: never released).
  std::vector<uint16_t> manifest_refs_ GUARDED_BY(mu_);
  std::deque<Registered> candidates_ GUARDED_BY(mu_);  // ended jobs' registered ids
  bool dirty_ GUARDED_BY(mu_) = false;    // something changed since the last planning pass
  bool passing_ GUARDED_BY(mu_) = false;  // a pass runs

  PrefetchSink* sink_ = nullptr;
  std::thread thread_;
};

}  // namespace epochfs::prefetch
