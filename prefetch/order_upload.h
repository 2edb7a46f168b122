// OrderUpload: one shuffle file or manifest on its way in, from any channel (a file written into
// <mount>/.epochfs/, the file watched by --shuffle-file, `epochfs publish`).
//
// Bytes are parsed as they arrive (OrderParser), and each entry naming a known file is mapped to
// its id at once, so an upload holds the schedule it builds and little of the text. A path the
// registry has never seen is kept aside and registered only when the upload is admitted: a
// refused upload (cut short, over a limit) leaves nothing in the registry. finish() publishes
// the result through the Planner, or refuses it whole when the file was cut short (#count).
//
// What an upload holds while written (entries and new paths) is charged to its writer in the
// ledger given, checked at each write: the write that would pass the writer's limit fails with
// EDQUOT and the upload will not publish. So is one that passes --max-entries-per-user. The
// new paths an admitted upload registers are charged to its writer in paths_ledger for good
// (the registry keeps them for the mount's life): past that limit the upload is refused whole.
//
// Thread-safety: none; one upload is written by one writer at a time (its FUSE handle's lock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cachestore/status.h"
#include "prefetch/file_registry.h"
#include "prefetch/grace.h"
#include "prefetch/order_parser.h"
#include "prefetch/planner.h"
#include "prefetch/user_ledger.h"

namespace epochfs::prefetch {

class OrderUpload {
 public:
  enum class Kind { kOrder, kManifest };

  // ledger, paths_ledger: where the upload's memory and the registry's for its new paths are
  // charged to its writer; null charges nothing (the mount's own --shuffle-file).
  OrderUpload(Kind kind, Publisher publisher, FileRegistry& registry, Planner& planner,
              UserLedger* ledger = nullptr, uint64_t max_entries = UINT64_MAX,
              UserLedger* paths_ledger = nullptr);
  ~OrderUpload();
  OrderUpload(const OrderUpload&) = delete;
  OrderUpload& operator=(const OrderUpload&) = delete;

  // Adds bytes written at offset. An upload is written front to back: a write at any other
  // offset fails with EINVAL and the upload will not publish.
  cachestore::Status write(uint64_t offset, std::string_view bytes);

  // The end of the input: parses what is left and publishes. Later calls return the same
  // report.
  const PublishReport& finish();

  bool finished() const { return report_.has_value(); }

  // How an order's entries are looked up in the source as it is published (kSampled of them,
  // spread over it): true if the path names a file the publisher may read, false if not,
  // nullopt if the source could not say. Without it, nothing is looked up.
  using LookUp = std::function<std::optional<bool>(const std::string& rel_path)>;
  static constexpr size_t kSampled = 16;

  void look_up_entries_with(LookUp look_up) { look_up_ = std::move(look_up); }

  // Holds ticket (prefetch/grace.h) until the upload goes.
  void hold(Grace::Ticket ticket) { ticket_ = std::move(ticket); }

  // Called with the CPU time (ns, of the calling thread) each write and the finish took, for
  // the engine to charge to the writer.
  using CpuMeter = std::function<void(int64_t ns)>;

  void meter_cpu_with(CpuMeter meter) { cpu_meter_ = std::move(meter); }

  // Turns the upload away before any of it is read, over a limit: its writes fail with EDQUOT
  // and the finish refuses it, saying why.
  void refuse_from_start(std::string why) {
    broken_ = std::move(why);
    over_limit_ = true;
  }

  // Whether any write has come, good or not.
  bool started() const { return next_offset_ > 0 || broken_.has_value(); }

 private:
  void add_entry(std::string_view entry, uint64_t line);
  // An entry of a range order: its blocks (prefetch/blocks.h), a run of samples in one block
  // counted once, and its file among those read by blocks; of a range manifest: its first
  // block, and a span of the blocks after it.
  void add_range(std::string_view entry, uint64_t line);
  // An index order's entry naming manifest line `index`: its id, then the further blocks of a
  // range crossing block ends.
  void add_indexed(uint32_t index);
  // Appends id unless it continues a run of samples in one block. False if a limit refused
  // the room: the upload is broken.
  bool add_block_or_file(FileId id);
  void add_block_file(FileId file);
  // The id of key, registered now (and charged to the writer) if new; nullopt if the charge
  // was refused, which breaks the upload.
  std::optional<FileId> registered(const std::string& key);
  // known: path's id if the registry knows it (looked up once, by add_entry); else a pending
  // entry (kPending | its index).
  FileId id_or_pending(std::string_view path, std::optional<FileId> known);
  // Charges the pending paths to the writer, then registers them and puts their ids in place.
  cachestore::Status register_pending();
  PublishReport refuse(std::string message);
  EntrySample look_up_sample() const;
  // Grows the buffers for `entries` entries and a new path of path_bytes, charging the growth
  // to the writer before it is made, so that an upload never holds more than its writer's
  // limit. False if a limit refused it: the upload is broken and has let go of everything.
  bool make_room(size_t entries, size_t path_bytes, size_t spans = 0);
  // Drops the entries and paths gathered and gives back their charge.
  void drop_held();
  // Gives the ids this upload registered to its job (Planner::hold_registered).
  void hand_over_registered();
  // A path of length bytes, charged to the writer, got id: kept as this upload's if added
  // (registered by it), else its charge goes back.
  void keep_or_uncharge(FileId id, bool added, size_t length);

  static constexpr FileId kPending = FileId{1} << 31;

  const Kind kind_;
  const Publisher publisher_;
  FileRegistry& registry_;
  Planner& planner_;
  UserLedger* const ledger_;
  const uint64_t max_entries_;
  UserLedger* const paths_ledger_;
  uint64_t charged_ = 0;  // bytes charged to the writer in ledger_
  RejectReport rejects_;
  OrderParser parser_;
  std::vector<FileId> entries_;
  std::string pending_paths_;                 // new paths, each ended by a NUL
  std::vector<uint32_t> pending_ends_;        // the end of each in pending_paths_
  std::vector<Manifest::Span> spans_;         // a manifest's, of ranges
  std::shared_ptr<const Manifest> manifest_;  // for index-form orders
  bool manifest_asked_ = false;  // asked the planner once: an upload indexes one manifest
  std::string last_block_;       // the last range entry's last block
  // The files this upload's entries are blocks of: a range order's or manifest's, or those of
  // the range manifest an index order indexes. Empty for whole files.
  std::vector<FileId> block_files_;
  size_t block_files_distinct_ = 0;  // its size when last made distinct
  // Ids registered for paths new to the registry, charged to the writer (each path's bytes
  // and FileRegistry::kBytesPerPath): the job holds them once published.
  std::vector<FileId> registered_;
  uint64_t next_offset_ = 0;
  std::optional<std::string> broken_;  // why the upload cannot publish
  bool over_limit_ = false;            // broken by a limit
  std::optional<PublishReport> report_;
  LookUp look_up_;
  CpuMeter cpu_meter_;
  Grace::Ticket ticket_;
};

}  // namespace epochfs::prefetch
