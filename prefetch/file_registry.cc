#include "prefetch/file_registry.h"

namespace epochfs::prefetch {

using cachestore::MutexLock;

FileId FileRegistry::id_of(const std::string& path) {
  MutexLock lock(mu_);
  auto it = ids_.find(path);
  if (it != ids_.end()) {
    return it->second;
  }
  const auto id = static_cast<FileId>(records_.size());
  records_.push_back(Record{path, {}, 0});
  ids_.emplace(records_.back().path, id);
  return id;
}

void FileRegistry::observe(FileId id, const FileVersion& version, int64_t now_ns) {
  MutexLock lock(mu_);
  if (id < records_.size()) {
    records_[id].seen = version;
    records_[id].seen_at_ns = now_ns;
  }
}

std::optional<FileVersion> FileRegistry::observed_since(FileId id, int64_t since_ns) const {
  MutexLock lock(mu_);
  if (id >= records_.size() || !records_[id].seen.valid() || records_[id].seen_at_ns < since_ns) {
    return std::nullopt;
  }
  return records_[id].seen;
}

std::string FileRegistry::path_of(FileId id) const {
  MutexLock lock(mu_);
  return id < records_.size() ? records_[id].path : std::string();
}

size_t FileRegistry::size() const {
  MutexLock lock(mu_);
  return records_.size();
}

}  // namespace epochfs::prefetch
