#include "fusefs/implicit_opens.h"

#include <fcntl.h>

#include <vector>

#include "fusefs/filesystem.h"

namespace epochfs::fusefs {

ImplicitOpens::Lease::~Lease() { fs_.release(handle_); }

cachestore::Result<std::shared_ptr<ImplicitOpens::Lease>> ImplicitOpens::for_read(
    InodeId ino, uint64_t offset, std::optional<uid_t> opener) {
  if (offset != 0) {
    if (auto kept = find(ino)) {
      return kept;
    }
  }
  auto opened = fs_.open(ino, O_RDONLY, opener);
  if (!opened.is_ok()) {
    return opened.status();
  }
  auto lease = std::make_shared<Lease>(fs_, opened.value().handle);
  keep(ino, lease);
  return lease;
}

std::shared_ptr<ImplicitOpens::Lease> ImplicitOpens::find(InodeId ino) {
  cachestore::MutexLock lock(mu_);
  auto it = leases_.find(ino);
  if (it == leases_.end()) {
    return nullptr;
  }
  order_.splice(order_.begin(), order_, it->second.second);
  return it->second.first;
}

void ImplicitOpens::keep(InodeId ino, std::shared_ptr<Lease> lease) {
  // Declared before the lock: released after it, so a Lease never closes under mu_.
  std::vector<std::shared_ptr<Lease>> dropped;
  cachestore::MutexLock lock(mu_);
  auto it = leases_.find(ino);
  if (it != leases_.end()) {
    dropped.push_back(std::move(it->second.first));
    order_.erase(it->second.second);
    leases_.erase(it);
  }
  order_.push_front(ino);
  leases_.emplace(ino, std::make_pair(std::move(lease), order_.begin()));
  while (leases_.size() > capacity_) {
    auto oldest = leases_.find(order_.back());
    dropped.push_back(std::move(oldest->second.first));
    leases_.erase(oldest);
    order_.pop_back();
  }
}

void ImplicitOpens::drop(InodeId ino) {
  std::shared_ptr<Lease> dropped;  // released after the lock: a Lease never closes under mu_
  cachestore::MutexLock lock(mu_);
  auto it = leases_.find(ino);
  if (it == leases_.end()) {
    return;
  }
  dropped = std::move(it->second.first);
  order_.erase(it->second.second);
  leases_.erase(it);
}

size_t ImplicitOpens::kept() const {
  cachestore::MutexLock lock(mu_);
  return leases_.size();
}

}  // namespace epochfs::fusefs
