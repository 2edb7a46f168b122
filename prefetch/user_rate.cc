#include "prefetch/user_rate.h"

#include <algorithm>

namespace epochfs::prefetch {

UserRate::UserRate(double per_s, double burst) : per_s_(per_s), burst_(burst) {}

UserRate::Bucket& UserRate::bucket(uid_t uid, int64_t now_ns) {
  // One bucket per user id: as many as the node has users, not as many as requests.
  Bucket& b = buckets_.try_emplace(uid, Bucket{burst_, now_ns}).first->second;
  const double elapsed_s = static_cast<double>(std::max<int64_t>(0, now_ns - b.at_ns)) / 1e9;
  b.tokens = std::min(burst_, b.tokens + elapsed_s * per_s_);
  b.at_ns = std::max(b.at_ns, now_ns);
  return b;
}

bool UserRate::take(uid_t uid, int64_t now_ns) {
  cachestore::MutexLock lock(mu_);
  Bucket& b = bucket(uid, now_ns);
  if (b.tokens < 1) {
    return false;
  }
  b.tokens -= 1;
  return true;
}

void UserRate::spend(uid_t uid, double amount, int64_t now_ns) {
  cachestore::MutexLock lock(mu_);
  bucket(uid, now_ns).tokens -= amount;
}

double UserRate::wait_s(uid_t uid, int64_t now_ns) {
  cachestore::MutexLock lock(mu_);
  const Bucket& b = bucket(uid, now_ns);
  return b.tokens >= 1 ? 0 : (1 - b.tokens) / per_s_;
}

}  // namespace epochfs::prefetch
