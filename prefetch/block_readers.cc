#include "prefetch/block_readers.h"

namespace epochfs::prefetch {

using cachestore::MutexLock;

void BlockReaders::add(uint32_t reader, const std::vector<FileId>& files) {
  MutexLock lock(mu_);
  for (FileId file : files) {
    ++orders_[{file, reader}];
  }
  size_.store(orders_.size(), std::memory_order_relaxed);
}

void BlockReaders::remove(uint32_t reader, const std::vector<FileId>& files) {
  MutexLock lock(mu_);
  for (FileId file : files) {
    auto it = orders_.find({file, reader});
    if (it != orders_.end() && --it->second == 0) {
      orders_.erase(it);
    }
  }
  size_.store(orders_.size(), std::memory_order_relaxed);
}

bool BlockReaders::reads_by_blocks(FileId file, std::optional<uid_t> opener) const {
  if (size() == 0) {
    return false;
  }
  MutexLock lock(mu_);
  if (!opener) {
    auto it = orders_.lower_bound({file, 0});
    return it != orders_.end() && it->first.first == file;
  }
  return orders_.contains({file, *opener}) || orders_.contains({file, kAnyone});
}

}  // namespace epochfs::prefetch
