#include "prefetch/order_upload.h"

#include <errno.h>

#include <string>

namespace epochfs::prefetch {

OrderUpload::OrderUpload(Kind kind, FileRegistry& registry, Planner& planner)
    : kind_(kind),
      registry_(registry),
      planner_(planner),
      parser_([this](std::string_view entry, uint64_t line) { add_entry(entry, line); }, &rejects_,
              OrderForm::kPaths) {}

cachestore::Status OrderUpload::write(uint64_t offset, std::string_view bytes) {
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
  return cachestore::Status::ok();
}

void OrderUpload::add_entry(std::string_view entry, uint64_t line) {
  if (kind_ == Kind::kManifest) {
    // Index i names the i-th entry line: a rejected line keeps its index, as kNoFile.
    entries_.resize(parser_.entry_lines() - 1, Planner::kNoFile);
    entries_.push_back(registry_.id_of(entry));
    return;
  }
  if (parser_.form() == OrderForm::kPaths) {
    entries_.push_back(registry_.id_of(entry));
    return;
  }
  if (!manifest_) {
    manifest_ = planner_.manifest();
  }
  const uint32_t index = *parse_index(entry);
  if (!manifest_) {
    rejects_.add(line, "no manifest published", entry);
  } else if (index >= manifest_->size()) {
    rejects_.add(line, "index past the manifest's end", entry);
  } else if ((*manifest_)[index] == Planner::kNoFile) {
    rejects_.add(line, "index names a rejected manifest line", entry);
  } else {
    entries_.push_back((*manifest_)[index]);
  }
}

const PublishReport& OrderUpload::finish() {
  if (report_) {
    return *report_;
  }
  cachestore::Status parsed = parser_.finish();
  if (broken_ || !parsed.is_ok()) {
    PublishReport r;
    r.stream = parser_.header().stream.value_or(kind_ == Kind::kManifest ? "manifest" : "");
    r.message = "not published: " + (broken_ ? *broken_ : parsed.context());
    r.rejects = std::move(rejects_);
    report_ = planner_.refuse(std::move(r));
    return *report_;
  }
  if (kind_ == Kind::kManifest) {
    entries_.resize(parser_.entry_lines(), Planner::kNoFile);
    report_ = planner_.publish_manifest(std::move(entries_), std::move(rejects_));
  } else if (entries_.empty()) {
    PublishReport r;
    r.stream = parser_.header().stream.value_or("");
    r.message = "not published: no usable entries";
    r.rejects = std::move(rejects_);
    report_ = planner_.refuse(std::move(r));
  } else {
    report_ = planner_.publish(parser_.header(), std::move(entries_), std::move(rejects_));
  }
  return *report_;
}

}  // namespace epochfs::prefetch
