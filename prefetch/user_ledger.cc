#include "prefetch/user_ledger.h"

#include <algorithm>

namespace epochfs::prefetch {

using cachestore::Status;

UserLedger::UserLedger(std::string what, std::string option, uint64_t per_user,
                       std::string cap_option, uint64_t cap, int err)
    : what_(std::move(what)),
      option_(std::move(option)),
      per_user_(per_user),
      cap_option_(std::move(cap_option)),
      cap_(cap),
      err_(err) {}

Status UserLedger::charge(uid_t uid, uint64_t n) {
  cachestore::MutexLock lock(mu_);
  auto it = held_.find(uid);
  const uint64_t mine = it == held_.end() ? 0 : it->second;
  if (mine + n > per_user_) {
    ++refused_;
    return Status::error(err_, "user " + std::to_string(uid) + " would hold " +
                                   std::to_string(mine + n) + " " + what_ +
                                   ", over the per-user limit (" + option_ + " " +
                                   std::to_string(per_user_) + ")");
  }
  if (total_ + n > cap_) {
    ++refused_;
    return Status::error(err_, "all users would hold " + std::to_string(total_ + n) + " " + what_ +
                                   ", over the mount's limit (" + cap_option_ + " " +
                                   std::to_string(cap_) + ")");
  }
  held_[uid] = mine + n;
  total_ += n;
  return Status::ok();
}

void UserLedger::release(uid_t uid, uint64_t n) {
  cachestore::MutexLock lock(mu_);
  auto it = held_.find(uid);
  if (it == held_.end()) {
    return;
  }
  const uint64_t given = std::min(n, it->second);
  it->second -= given;
  total_ -= given;
  if (it->second == 0) {
    held_.erase(it);  // a user who holds nothing costs nothing
  }
}

uint64_t UserLedger::held(uid_t uid) const {
  cachestore::MutexLock lock(mu_);
  auto it = held_.find(uid);
  return it == held_.end() ? 0 : it->second;
}

uint64_t UserLedger::total() const {
  cachestore::MutexLock lock(mu_);
  return total_;
}

uint64_t UserLedger::refused() const {
  cachestore::MutexLock lock(mu_);
  return refused_;
}

}  // namespace epochfs::prefetch
