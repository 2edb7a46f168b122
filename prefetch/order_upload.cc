#include "prefetch/order_upload.h"

#include <errno.h>

#include <algorithm>
#include <string>

#include "cachestore/sync.h"
#include "prefetch/blocks.h"

namespace epochfs::prefetch {

OrderUpload::OrderUpload(Kind kind, Publisher publisher, FileRegistry& registry, Planner& planner,
                         UserLedger* ledger, uint64_t max_entries, UserLedger* paths_ledger)
    : kind_(kind),
      publisher_(std::move(publisher)),
      registry_(registry),
      planner_(planner),
      ledger_(ledger),
      max_entries_(max_entries),
      paths_ledger_(paths_ledger),
      parser_([this](std::string_view entry, uint64_t line) { add_entry(entry, line); }, &rejects_,
              OrderForm::kPaths) {}

OrderUpload::~OrderUpload() {
  drop_held();
  hand_over_registered();
}

void OrderUpload::hand_over_registered() {
  std::vector<FileId> ids;
  ids.swap(registered_);
  // The mount's own orders (--shuffle-file, not charged) name paths for the mount's life.
  if (paths_ledger_ != nullptr) {
    planner_.hold_registered(publisher_, parser_.header(), std::move(ids));
  }
}

namespace {

// Hands the CPU time the calling thread spends in its scope to meter, if there is one.
class CpuCharge {
 public:
  explicit CpuCharge(const OrderUpload::CpuMeter& meter)
      : meter_(meter), start_ns_(meter ? cachestore::thread_cpu_ns() : 0) {}

  ~CpuCharge() {
    if (meter_) {
      meter_(cachestore::thread_cpu_ns() - start_ns_);
    }
  }

  CpuCharge(const CpuCharge&) = delete;
  CpuCharge& operator=(const CpuCharge&) = delete;

 private:
  const OrderUpload::CpuMeter& meter_;
  const int64_t start_ns_;
};

}  // namespace

cachestore::Status OrderUpload::write(uint64_t offset, std::string_view bytes) {
  const CpuCharge charge(cpu_meter_);
  if (broken_ && over_limit_ && !report_) {
    return cachestore::Status::error(EDQUOT, *broken_);
  }
  if (report_ || broken_) {
    return cachestore::Status::error(EINVAL, "write after the upload ended");
  }
  if (offset != next_offset_) {
    broken_ = "written out of order (at offset " + std::to_string(offset) + ", expected " +
              std::to_string(next_offset_) + ")";
    return cachestore::Status::error(EINVAL, *broken_);
  }
  next_offset_ += bytes.size();
  parser_.feed(bytes);
  if (broken_ && over_limit_) {
    return cachestore::Status::error(EDQUOT, *broken_);
  }
  return cachestore::Status::ok();
}

bool OrderUpload::make_room(size_t entries, size_t path_bytes, size_t spans) {
  if (broken_) {
    return false;
  }
  if (entries > max_entries_) {
    broken_ = "more than " + std::to_string(max_entries_) +
              " entries, over the per-user limit (--max-entries-per-user " +
              std::to_string(max_entries_) + ")";
    over_limit_ = true;
    drop_held();
    return false;
  }
  if (ledger_ == nullptr) {
    return true;  // not charged: the buffers grow as they will
  }
  const auto grown = [](size_t capacity, size_t need) {
    return need <= capacity ? capacity : std::max(need, capacity + capacity / 2 + 64);
  };
  const size_t e = grown(entries_.capacity(), entries);
  const size_t p = grown(pending_paths_.capacity(), pending_paths_.size() + path_bytes);
  const size_t n = grown(pending_ends_.capacity(), pending_ends_.size() + (path_bytes > 0));
  const size_t s = grown(spans_.capacity(), spans);
  const uint64_t held = e * sizeof(FileId) + p + n * sizeof(uint32_t) + s * sizeof(Manifest::Span);
  if (held > charged_) {
    cachestore::Status charged = ledger_->charge(publisher_.uid, held - charged_);
    if (!charged.is_ok()) {
      broken_ = charged.context();
      over_limit_ = true;
      drop_held();
      return false;
    }
    charged_ = held;
  }
  entries_.reserve(e);
  pending_paths_.reserve(p);
  pending_ends_.reserve(n);
  spans_.reserve(s);
  return true;
}

void OrderUpload::drop_held() {
  // Swapped out, not assigned: assigning an empty string keeps the old one's buffer.
  std::vector<FileId>().swap(entries_);
  std::string().swap(pending_paths_);
  std::vector<uint32_t>().swap(pending_ends_);
  std::vector<Manifest::Span>().swap(spans_);
  if (ledger_ != nullptr && charged_ > 0) {
    ledger_->release(publisher_.uid, charged_);
  }
  charged_ = 0;
}

void OrderUpload::add_entry(std::string_view entry, uint64_t line) {
  if (parser_.form() == OrderForm::kRanges) {
    add_range(entry, line);
    return;
  }
  const bool paths = kind_ == Kind::kManifest || parser_.form() == OrderForm::kPaths;
  const std::optional<FileId> known = paths ? registry_.find(entry) : std::nullopt;
  // Index i of a manifest names the i-th entry line: a rejected line keeps its index.
  const size_t after = kind_ == Kind::kManifest ? parser_.entry_lines() : entries_.size() + 1;
  if (!make_room(after, paths && !known ? entry.size() : 0)) {
    return;  // over a limit: the upload is broken and holds nothing
  }
  if (kind_ == Kind::kManifest) {
    entries_.resize(parser_.entry_lines() - 1, Planner::kNoFile);
    entries_.push_back(id_or_pending(entry, known));
    return;
  }
  if (parser_.form() == OrderForm::kPaths) {
    entries_.push_back(id_or_pending(entry, known));
    return;
  }
  if (!manifest_asked_) {
    manifest_asked_ = true;
    Planner::HeldManifest held = planner_.manifest(publisher_, parser_.header());
    manifest_ = std::move(held.manifest);
    block_files_ = std::move(held.block_files);
  }
  const uint32_t index = *parse_index(entry);
  if (!manifest_) {
    rejects_.add(line, "no manifest published", entry);
  } else if (index >= manifest_->ids.size()) {
    rejects_.add(line, "index past the manifest's end", entry);
  } else if (manifest_->ids[index] == Planner::kNoFile) {
    rejects_.add(line, "index names a rejected manifest line", entry);
  } else {
    add_indexed(index);
  }
}

bool OrderUpload::add_block_or_file(FileId id) {
  if (!block_files_.empty() && !entries_.empty() && entries_.back() == id) {
    return true;  // a run of samples in one block: one entry
  }
  if (!make_room(entries_.size() + 1, 0)) {
    return false;
  }
  entries_.push_back(id);
  return true;
}

void OrderUpload::add_indexed(uint32_t index) {
  if (!add_block_or_file(manifest_->ids[index])) {
    return;
  }
  const auto& spans = manifest_->spans;
  const auto span =
      std::lower_bound(spans.begin(), spans.end(), index,
                       [](const Manifest::Span& s, uint32_t line) { return s.line < line; });
  if (span == spans.end() || span->line != index) {
    return;
  }
  // The first block's key names the file and the block: the rest follow it. Registered (and
  // charged to this order's writer) here, not by the manifest: only what orders name is held.
  const std::string first = registry_.path_of(manifest_->ids[index]);
  const auto block = parse_block_key(first);
  for (uint32_t k = 1; block && k <= span->more; ++k) {
    const auto id = registered(block_key(block->path, block->block + k));
    if (!id || !add_block_or_file(*id)) {
      return;
    }
  }
}

void OrderUpload::add_block_file(FileId file) {
  if (!block_files_.empty() && block_files_.back() == file) {
    return;
  }
  block_files_.push_back(file);
  // Ranges alternating between files would add one per entry: kept to twice the distinct ones
  // (and never more than the entries, which are charged).
  if (block_files_.size() >= 2 * block_files_distinct_ + 64) {
    std::sort(block_files_.begin(), block_files_.end());
    block_files_.erase(std::unique(block_files_.begin(), block_files_.end()), block_files_.end());
    block_files_distinct_ = block_files_.size();
  }
}

void OrderUpload::add_range(std::string_view entry, uint64_t /*line*/) {
  const char* why = "";
  const auto range = parse_range(entry, &why);  // the parser wrote it: well-formed
  if (!range) {
    return;
  }
  const auto file = registered(std::string(range->path));
  if (!file) {
    return;  // over the path memory limit: the upload is broken
  }
  add_block_file(*file);
  if (kind_ == Kind::kManifest) {
    // Index i of a manifest names the i-th entry line, here its range's first block; a span
    // counts the blocks after it.
    const auto more = static_cast<uint32_t>(range->last_block() - range->first_block());
    const auto line = static_cast<uint32_t>(parser_.entry_lines() - 1);
    auto id = registered(block_key(range->path, range->first_block()));
    if (!id || !make_room(parser_.entry_lines(), 0, spans_.size() + (more > 0 ? 1 : 0))) {
      return;
    }
    entries_.resize(line, Planner::kNoFile);
    entries_.push_back(*id);
    if (more > 0) {
      spans_.push_back(Manifest::Span{line, more});
    }
    return;
  }
  for (uint64_t b = range->first_block(); b <= range->last_block(); ++b) {
    std::string key = block_key(range->path, b);
    if (key == last_block_) {
      continue;  // the next sample in the same block: one occurrence
    }
    auto id = registered(key);
    if (!id || !make_room(entries_.size() + 1, 0)) {
      return;
    }
    entries_.push_back(*id);
    last_block_ = std::move(key);
  }
}

std::optional<FileId> OrderUpload::registered(const std::string& key) {
  if (auto known = registry_.find(key)) {
    return known;
  }
  // Registered at once, not at the end as new paths are: a file's blocks recur all through a
  // range order, and pending paths are not deduplicated. Charged as every new path is.
  if (paths_ledger_ != nullptr) {
    if (cachestore::Status charged =
            paths_ledger_->charge(publisher_.uid, key.size() + FileRegistry::kBytesPerPath);
        !charged.is_ok()) {
      broken_ = charged.context();
      over_limit_ = true;
      drop_held();
      return std::nullopt;
    }
  }
  bool added = false;
  const FileId id = registry_.order_id_of(key, &added);
  keep_or_uncharge(id, added, key.size());
  return id;
}

void OrderUpload::keep_or_uncharge(FileId id, bool added, size_t length) {
  if (added) {
    registered_.push_back(id);
  } else if (paths_ledger_ != nullptr) {
    // Another upload registered it meanwhile (the ranks of one job publishing the same new
    // paths at once): that upload holds it, and is charged for it.
    paths_ledger_->release(publisher_.uid, length + FileRegistry::kBytesPerPath);
  }
}

FileId OrderUpload::id_or_pending(std::string_view path, std::optional<FileId> known) {
  if (known) {
    return *known;
  }
  if (pending_ends_.size() >= kPending - 2) {
    // Past 2^31 new paths in one upload: registered at once, not charged, kept for good (no
    // upload gets there: the entry limits are far below).
    return registry_.id_of(path);
  }
  pending_paths_.append(path);
  pending_ends_.push_back(static_cast<uint32_t>(pending_paths_.size()));
  return kPending | static_cast<FileId>(pending_ends_.size() - 1);
}

cachestore::Status OrderUpload::register_pending() {
  if (pending_ends_.empty()) {
    return cachestore::Status::ok();
  }
  if (paths_ledger_ != nullptr) {
    const uint64_t bytes =
        pending_paths_.size() + pending_ends_.size() * FileRegistry::kBytesPerPath;
    if (cachestore::Status charged = paths_ledger_->charge(publisher_.uid, bytes);
        !charged.is_ok()) {
      over_limit_ = true;
      return charged;
    }
  }
  std::vector<FileId> ids(pending_ends_.size());
  uint32_t begin = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view path =
        std::string_view(pending_paths_).substr(begin, pending_ends_[i] - begin);
    bool added = false;
    ids[i] = registry_.order_id_of(path, &added);
    keep_or_uncharge(ids[i], added, path.size());
    begin = pending_ends_[i];
  }
  for (FileId& e : entries_) {
    if (e != Planner::kNoFile && (e & kPending) != 0) {
      e = ids[e & ~kPending];
    }
  }
  std::string().swap(pending_paths_);
  std::vector<uint32_t>().swap(pending_ends_);
  return cachestore::Status::ok();
}

PublishReport OrderUpload::refuse(std::string message) {
  PublishReport r;
  r.uid = publisher_.uid;
  r.stream = parser_.header().stream.value_or(kind_ == Kind::kManifest ? "manifest" : "");
  r.message = std::move(message);
  r.rejects = std::move(rejects_);
  return planner_.refuse(std::move(r), over_limit_);
}

const PublishReport& OrderUpload::finish() {
  if (report_) {
    return *report_;
  }
  const CpuCharge charge(cpu_meter_);
  cachestore::Status parsed = parser_.finish();
  if (broken_ || !parsed.is_ok()) {
    report_ = refuse("not published: " + (broken_ ? *broken_ : parsed.context()));
    drop_held();
    return *report_;
  }
  if (!entries_.empty()) {
    // Checked again when published; here so that an upload over a limit registers nothing.
    cachestore::Status admitted =
        planner_.admits(publisher_, parser_.header(), kind_ == Kind::kManifest, entries_.size());
    if (!admitted.is_ok()) {
      report_ = refuse("not published: " + admitted.context());
      drop_held();
      return *report_;
    }
    if (cachestore::Status registered = register_pending(); !registered.is_ok()) {
      report_ = refuse("not published: " + registered.context());
      drop_held();
      return *report_;
    }
  }
  if (kind_ == Kind::kManifest) {
    entries_.resize(parser_.entry_lines(), Planner::kNoFile);
    report_ = planner_.publish_manifest(publisher_, parser_.header(),
                                        Manifest{std::move(entries_), std::move(spans_)},
                                        std::move(rejects_), std::move(block_files_));
  } else if (entries_.empty()) {
    report_ = refuse("not published: no usable entries");
  } else {
    const EntrySample sample = look_up_sample();
    report_ = planner_.publish(publisher_, parser_.header(), std::move(entries_),
                               std::move(rejects_), sample, std::move(block_files_));
  }
  drop_held();  // what was published is the job's now, held against its entry limit
  hand_over_registered();
  return *report_;
}

EntrySample OrderUpload::look_up_sample() const {
  EntrySample sample;
  if (!look_up_) {
    return sample;
  }
  const size_t n = entries_.size();
  const size_t k = std::min(n, kSampled);
  for (size_t i = 0; i < k; ++i) {
    std::string path = registry_.path_of(entries_[i * n / k]);
    if (auto block = parse_block_key(path)) {
      path = std::move(block->path);  // a range order's block: its file is looked up
    }
    const auto found = look_up_(path);
    if (found) {
      ++sample.checked;
      sample.found += *found ? 1 : 0;
    }
  }
  return sample;
}

}  // namespace epochfs::prefetch
