// KeptVersions: the source versions of copies an earlier mount kept, until each is opened.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/file_version.h"

namespace epochfs::cachestore {

// Kept copies are adopted as a mount starts, when their files are the first the registry
// numbers, so their ids are dense: a vector by id costs 40 bytes a copy where a hash map's
// nodes cost ~73. It is let go whole once the last kept copy has been opened or dropped.
class KeptVersions {
 public:
  // How many copies are coming: reserved at the first set(), so that nothing is held if
  // none is.
  void expect(size_t copies) { expected_ = copies; }

  // version must be valid (a kept copy's).
  void set(FileId id, const FileVersion& version) {
    if (!version.valid()) {
      return;
    }
    if (id >= by_id_.capacity()) {
      // A quarter more at a time, not double: 40 bytes a copy is the cost to keep low.
      by_id_.reserve(
          std::max({size_t{id} + 1, by_id_.capacity() + by_id_.capacity() / 4, expected_}));
    }
    if (id >= by_id_.size()) {
      by_id_.resize(id + 1);
    }
    held_ += by_id_[id].valid() ? 0 : 1;
    by_id_[id] = version;
  }

  std::optional<FileVersion> get(FileId id) const {
    if (id < by_id_.size() && by_id_[id].valid()) {
      return by_id_[id];
    }
    return std::nullopt;
  }

  void erase(FileId id) {
    if (id >= by_id_.size() || !by_id_[id].valid()) {
      return;
    }
    by_id_[id] = FileVersion{};
    if (--held_ == 0) {
      std::vector<FileVersion>().swap(by_id_);
    }
  }

  size_t size() const { return held_; }

  // Bytes reserved for versions: 0 when none is held. For tests.
  size_t bytes() const { return by_id_.capacity() * sizeof(FileVersion); }

 private:
  std::vector<FileVersion> by_id_;
  size_t held_ = 0;
  size_t expected_ = 0;
};

}  // namespace epochfs::cachestore
