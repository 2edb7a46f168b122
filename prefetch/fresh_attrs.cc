#include "prefetch/fresh_attrs.h"

#include <algorithm>

namespace epochfs::prefetch {

using cachestore::MutexLock;

FreshAttrs::FreshAttrs(size_t slots) : slots_(std::max<size_t>(1, slots)) {}

void FreshAttrs::put(FileId id, const struct stat& st, int64_t now_ns) {
  MutexLock lock(mu_);
  Slot& slot = slots_[id % slots_.size()];
  slot.id = id;
  slot.read_at_ns = now_ns;
  slot.st = st;
}

std::optional<struct stat> FreshAttrs::get(FileId id, int64_t since_ns) const {
  MutexLock lock(mu_);
  const Slot& slot = slots_[id % slots_.size()];
  if (slot.id != id || slot.read_at_ns < since_ns) {
    return std::nullopt;
  }
  return slot.st;
}

void FreshAttrs::forget(FileId id) {
  MutexLock lock(mu_);
  Slot& slot = slots_[id % slots_.size()];
  if (slot.id == id) {
    slot = Slot{};
  }
}

}  // namespace epochfs::prefetch
