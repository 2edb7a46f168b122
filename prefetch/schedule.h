// Schedule: the published orders of every stream, the trainer's position in each, and the
// next use of every file.
//
// A stream is one reader of the dataset with its own order (one rank of a distributed job).
// Each stream holds a queue of published epochs; the front one is current. Positions are
// counted on the stream's timeline: epoch k's entry p is at start(k) + p, and epochs follow
// each other without gaps, so staging can run across an epoch boundary.
//
// Progress comes from opens only (no trainer-side call): an open of file F is matched to F's
// unconsumed occurrence at or after the stream's tail, which is then consumed. Two positions
// describe a stream: head, one past the furthest consumed entry (where the trainer is), and
// tail, the first entry not consumed (parallel loader workers open slightly out of order, so
// tail lags head). Entries more than the reorder window behind head are taken as skipped. An
// open that matches the first reorder-window entries of the stream's next epoch starts that
// epoch. Opens of files outside every order change nothing.
//
// Next use: every entry of every live epoch is linked to the next occurrence of the same file
// (in publication order, across streams), so finding a file's occurrences costs O(1) per
// occurrence. next_use(F) is the smallest distance ahead of its stream's head over F's
// unconsumed occurrences, shifted by the mean head over streams so that the value of a file not
// consumed stays the same as the trainer advances (for one stream it is simply the timeline
// position). Eviction compares these values; kNever means no known next use.
//
// Range orders: a block is named once per sample, hundreds of times an epoch. The planner keeps
// 16 of a block's entries an epoch and says how many uses each stands for (itself and those
// thinned after it). The block's READs are uses (on_block_read), counted by their bytes, as the
// kernel reads ahead and its page cache answers later samples' reads, which never reach us: a
// READ of a fraction f of the block counts for f x the block's uses in the epoch, one at least
// if it does not continue the reader's last. An entry is consumed when the uses before it are
// used up, so the stream keeps pace with its reader.
//
// Memory: 8 bytes per entry (file id, link), 16 in a range order's epoch, and 8 per file
// (first and last occurrence).
//
// Thread-safety: none. The Planner owns it under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/status.h"

namespace epochfs::prefetch {

using cachestore::FileId;

class Schedule {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;
  // The reorder window: entries an open may lie behind the head before the ones between are
  // taken as skipped, and how far into the next epoch an open may land and still start it
  // (--reorder-window; the samples a DataLoader holds in flight: workers x batch x prefetch).
  static constexpr uint64_t kDefaultReorderWindow = 4096;

  explicit Schedule(uint64_t reorder_window = kDefaultReorderWindow)
      : reorder_window_(reorder_window == 0 ? 1 : reorder_window) {}

  // Streams over all jobs (a job's own limit is the planner's: prefetch/jobs.h).
  static constexpr size_t kMaxStreams = 1024;
  static constexpr size_t kMaxEpochsPerStream = 4;
  // Occurrences of one file in one epoch's order (the planner skips those past it): bounds the
  // walk an open makes over its file's occurrences by kMaxRepeats x epochs x streams, whatever
  // anyone published.
  static constexpr uint8_t kMaxRepeats = 16;
  // Uses one entry of a range order's block may stand for (on_block_read), and the parts of
  // a use its credit is counted in.
  static constexpr uint32_t kMaxUses = (UINT32_MAX >> 8) - 1;
  static constexpr uint32_t kUseUnits = 256;

  // A range order's block is named once per sample it holds: hundreds of times an epoch, by
  // design, not by mistake. Past kMaxRepeats its entries are thinned evenly over the epoch,
  // without a report, so that its next use is known to within 1/16 of an epoch. Returns the
  // uses each kept entry stands for (itself and those dropped after it), for publish.
  static std::vector<uint32_t> thin_repeats(std::vector<FileId>& entries);
  // Entries held over all streams; keeps links within 31 bits.
  static constexpr uint64_t kMaxEntries = (uint64_t{1} << 31) - 1;

  struct Published {
    size_t stream;
    uint64_t epoch;
    bool replaced;    // an epoch of that number was queued and is replaced
    bool restarted;   // it was older than the current epoch: the stream started again
    bool new_stream;  // the stream did not exist (its slot may have held a dropped one)
  };

  // Queues entries as epoch `epoch` (next after the last one if nullopt) of `stream`. An epoch
  // already queued is replaced. One older than the current epoch restarts the stream (a rerun
  // of the same job, or a restart from a checkpoint): every queued epoch is dropped and the
  // new one becomes current.
  // owner: the user whose opens advance the stream (its job's); nullopt: anyone's.
  // restart: restart the stream at this epoch whatever its number (`#restart`).
  // uses: empty, or per entry the uses of its file it stands for (a range order's thinned
  // block: see above).
  cachestore::Result<Published> publish(const std::string& stream, std::optional<uint64_t> epoch,
                                        std::vector<FileId> entries,
                                        std::optional<uint32_t> owner = std::nullopt,
                                        bool restart = false,
                                        const std::vector<uint32_t>& uses = {});

  // An open of file by a reader. The stream whose order it matched, if any.
  struct Match {
    size_t stream;
    bool new_epoch;            // the open started the stream's next epoch
    bool ended_epoch = false;  // the open used up the stream's current epoch
    bool consumed = true;      // false: a block's read used up no entry
  };

  // opener: the user who opened it; only streams of that user (or of anyone) can match, so that
  // another user's reads of the same files never move a job's position. nullopt: any stream.
  std::optional<Match> on_open(FileId file, std::optional<uint32_t> opener = std::nullopt);

  // A READ of bytes of file, a block of a range order; fresh if it does not continue the
  // reader's last READ of the file. As on_open for a block of no range order's current epoch.
  std::optional<Match> on_block_read(FileId file, uint64_t bytes, bool fresh,
                                     std::optional<uint32_t> opener = std::nullopt);

  // See the header comment. Not const: it drops consumed occurrences from F's chain.
  uint64_t next_use(FileId file);
  // Whether two occurrences of file not yet consumed lie in one epoch (a range order's block).
  bool repeats(FileId file);
  // Whether file is named in a range order's current epoch and in no later epoch.
  bool this_epoch_only(FileId file);

  // The next entry of stream ahead of the planner's position, if it lies less than `ahead`
  // entries past the head; advances the planner's position. Consumed entries are skipped.
  std::optional<FileId> next_to_stage(size_t stream, uint64_t ahead);
  // Moves every stream's planner position back to its head: the entries handed out since may
  // not have been staged (their copies failed while the source was down).
  void replan();

  struct StreamView {
    std::string id;
    bool active = false;  // has a current epoch
    uint64_t epoch = 0;   // current epoch number
    uint64_t epoch_length = 0;
    uint64_t position = 0;       // head, relative to the current epoch's start
    uint64_t planned_ahead = 0;  // entries past the head handed to the planner
    uint64_t epochs_queued = 0;  // after the current one
  };

  // Stream slots, live or free (a dropped stream's slot is reused by the next new stream).
  size_t stream_count() const { return streams_.size(); }

  bool stream_live(size_t stream) const { return !streams_[stream].id.empty(); }

  // The slot of the live stream named id, if any.
  std::optional<size_t> find_stream(const std::string& id) const;

  // Entries held by stream's queued epochs.
  uint64_t stream_entries(size_t stream) const;

  // Forgets stream (its job ended): its epochs go, its files' next uses with them, and its slot
  // is free for a new stream.
  void drop_stream(size_t stream);

  StreamView view(size_t stream) const;

  uint64_t entries_held() const { return entries_held_; }

  size_t files_tracked() const { return links_.size(); }

  // Bytes held by the schedule's structures (entries and per-file links), for docs and stats.
  uint64_t memory_bytes() const;

 private:
  const uint64_t reorder_window_;

  struct Slot {
    FileId file;
    uint32_t link;  // bit 31: consumed; bits 0..30: gid distance to the file's next slot
  };

  // A range order's entry: the uses it stands for, and those left, in kUseUnits, once consumed.
  struct Credit {
    uint32_t uses;
    uint32_t left;
  };

  struct Epoch {
    size_t stream;
    uint64_t number;
    uint64_t gid;    // global id of slots[0]
    uint64_t start;  // stream timeline position of slots[0]
    std::vector<Slot> slots;
    std::vector<Credit> credits;  // per slot, for a range order's epoch; else empty
  };

  struct Stream {
    std::string id;
    std::deque<std::unique_ptr<Epoch>> epochs;  // front: current
    uint64_t tail = 0;
    uint64_t head = 0;
    uint64_t plan = 0;
    std::optional<uint64_t> last_number;  // of the newest epoch ever queued
    std::optional<uint32_t> owner;        // whose opens advance it; nullopt: anyone's
  };

  // Gids as 32 bits: live gids are dense (relink_all renumbers them whenever an epoch leaves
  // or is replaced, and new epochs follow on), so they stay below entries_held_ <= kMaxEntries.
  struct Links {
    uint32_t first = kNoLink;
    uint32_t last = kNoLink;
  };

  static constexpr uint32_t kNoLink = UINT32_MAX;
  static_assert(kMaxEntries < kNoLink);

  static uint64_t gid_of(uint32_t link) { return link == kNoLink ? kNoGid : link; }

  static uint32_t link_of(uint64_t gid) {
    return gid == kNoGid ? kNoLink : static_cast<uint32_t>(gid);
  }

  struct Place {
    Epoch* epoch;
    size_t index;
  };

  static constexpr uint64_t kNoGid = UINT64_MAX;
  static constexpr uint32_t kConsumed = uint32_t{1} << 31;

  size_t stream_index(const std::string& id, bool* created);
  void clear_epochs(Stream& s);
  void link_epoch(Epoch& e);
  void relink_all();
  Place place_of(uint64_t gid) const;
  uint64_t next_gid(uint64_t gid, const Slot& slot) const;
  Slot* slot_at(Stream& s, uint64_t pos);
  std::optional<Place> first_credited(FileId file, std::optional<uint32_t> opener);
  void consume(Stream& s, Epoch& e, size_t index);
  void advance_tail(Stream& s);
  void retire_front(Stream& s);
  void restart_timeline(Stream& s);
  int64_t mean_head() const;

  std::deque<Stream> streams_;  // a deque: Stream is not nothrow-movable
  std::vector<Epoch*> by_gid_;  // live epochs, ascending gid
  std::vector<Links> links_;    // by FileId
  uint64_t next_gid_ = 0;
  uint64_t entries_held_ = 0;
};

}  // namespace epochfs::prefetch
