// CacheStore, continued: the names of copies. An entry keeps none: a copy's name is its
// file's path's (CacheDir::object_name), asked of the engine's registry (set_names).
#include "cachestore/cache_store.h"

namespace epochfs::cachestore {

std::string CacheStore::object_name_of(FileId id) const {
  std::string path = path_of_ ? path_of_(id) : std::string();
  if (path.empty()) {
    MutexLock lock(mu_);
    const auto it = released_names_.find(id);
    if (it == released_names_.end()) {
      return {};
    }
    path = it->second;
  }
  return CacheDir::object_name(path);
}

void CacheStore::keep_names(const NamedIds& released) {
  MutexLock lock(mu_);
  for (const auto& [id, path] : released) {
    if (entries_.contains(id)) {
      released_names_[id] = path;
    }
  }
}

void CacheStore::erase_entry_locked(FileId id) {
  entries_.erase(id);
  kept_versions_.erase(id);
  released_names_.erase(id);
}

}  // namespace epochfs::cachestore
