// UserLedger: how much of one resource each user has made the daemon hold, against a per-user
// limit and a mount-wide cap.
//
// On a node mount shared by every user, whatever a user's requests make the root daemon keep
// (upload buffers, open descriptors) is charged to that user, refused past their limit, and
// given back when it goes. The per-user limit is below the mount's cap, so no one user can
// reach the cap; the cap bounds what all users together can make the daemon hold.
// docs/semantics.md, "A shared node: what one user can make the daemon do", lists the ledgers.
//
// Thread-safety: all methods may be called concurrently (one leaf mutex).
#pragma once

#include <errno.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "cachestore/status.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

class UserLedger {
 public:
  // what: the resource as a message names it ("bytes of uploads being written"); option and
  // cap_option: the flags that set the limits, named in refusals.
  // err: the errno a refusal carries.
  UserLedger(std::string what, std::string option, uint64_t per_user, std::string cap_option,
             uint64_t cap, int err = EDQUOT);

  // Charges n to uid. err, naming the limit and its option, if uid would then hold more
  // than the per-user limit or all users more than the cap; nothing is charged then.
  cachestore::Status charge(uid_t uid, uint64_t n) EXCLUDES(mu_);
  // Gives back n of what uid holds.
  void release(uid_t uid, uint64_t n) EXCLUDES(mu_);

  uint64_t held(uid_t uid) const EXCLUDES(mu_);
  uint64_t total() const EXCLUDES(mu_);
  // Charges refused since the start.
  uint64_t refused() const EXCLUDES(mu_);

  uint64_t per_user() const { return per_user_; }

 private:
  const std::string what_;
  const std::string option_;
  const uint64_t per_user_;
  const std::string cap_option_;
  const uint64_t cap_;
  const int err_;
  mutable cachestore::Mutex mu_;
  std::unordered_map<uid_t, uint64_t> held_ GUARDED_BY(mu_);  // users holding anything
  uint64_t total_ GUARDED_BY(mu_) = 0;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::prefetch
