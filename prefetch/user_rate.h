// UserRate: how often each user may make the daemon do one kind of work that no ledger holds
// (a look-up in the source on their behalf), as a token bucket per user.
//
// Work a user's request makes the daemon do right away, and then forget, cannot be charged to
// a ledger (prefetch/user_ledger.h): nothing stays held. It is bounded by rate instead: each
// user starts with `burst` tokens, one is taken per unit of work, and they come back at
// `per_s` a second up to `burst`. A user over the rate is told no, and the work is skipped;
// other users' buckets are their own.
//
// Thread-safety: take may be called concurrently (one leaf mutex).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>

#include "cachestore/sync.h"

namespace epochfs::prefetch {

class UserRate {
 public:
  UserRate(double per_s, double burst);

  // Takes one token of uid's at now_ns (a steady clock); false, taking none, if uid has none.
  bool take(uid_t uid, int64_t now_ns) EXCLUDES(mu_);

  // Takes amount of uid's tokens at now_ns, into debt if need be: for work measured once
  // done (CPU time), which the next request of uid's then waits out.
  void spend(uid_t uid, double amount, int64_t now_ns) EXCLUDES(mu_);
  // Seconds from now_ns until uid has a token again; 0 if it has one.
  double wait_s(uid_t uid, int64_t now_ns) EXCLUDES(mu_);

 private:
  struct Bucket {
    double tokens;
    int64_t at_ns;  // when tokens was last brought up to date
  };

  // uid's bucket, brought up to date at now_ns.
  Bucket& bucket(uid_t uid, int64_t now_ns) REQUIRES(mu_);

  const double per_s_;
  const double burst_;
  cachestore::Mutex mu_;
  std::unordered_map<uid_t, Bucket> buckets_ GUARDED_BY(mu_);  // one per user seen
};

}  // namespace epochfs::prefetch
