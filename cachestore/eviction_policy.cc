#include "cachestore/eviction_policy.h"

namespace epochfs::cachestore {

void LruPolicy::touch(FileId id) {
  auto it = where_.find(id);
  if (it != where_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  order_.push_front(id);
  where_.emplace(id, order_.begin());
}

void LruPolicy::removed(FileId id) {
  auto it = where_.find(id);
  if (it == where_.end()) {
    return;
  }
  order_.erase(it->second);
  where_.erase(it);
}

std::optional<FileId> LruPolicy::choose_victim(const std::function<bool(FileId)>& can_evict) {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (can_evict(*it)) {
      return *it;
    }
  }
  return std::nullopt;
}

}  // namespace epochfs::cachestore
