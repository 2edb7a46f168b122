#include "prefetch/copy_concurrency.h"

#include <algorithm>
#include <cmath>

namespace epochfs::prefetch {

CopyConcurrency::CopyConcurrency(unsigned max)
    : max_(std::max(1u, max)), limit_(std::min(kInitial, std::max(1u, max))) {}

void CopyConcurrency::finished(int64_t duration_ns, int64_t now_ns, bool busy) {
  cachestore::MutexLock lock(mu_);
  if (round_copies_ == 0) {
    // A round starts when the last ended, or with its first copy after a pause in staging.
    round_start_ns_ = std::max(round_start_ns_, now_ns - std::max<int64_t>(duration_ns, 1));
  }
  const auto took = static_cast<double>(std::max<int64_t>(duration_ns, 1));
  round_sum_ns_ += took;
  round_busy_ = round_busy_ && busy;
  if (probe_since_ns_ != 0 && now_ns - duration_ns >= probe_since_ns_) {
    probe_sum_ns_ += took;  // started once the probe had lowered the limit: no queue behind
    ++probe_copies_;
  }
  if (++round_copies_ >= limit_.load(std::memory_order_relaxed)) {
    end_round(now_ns);
  }
}

void CopyConcurrency::end_round(int64_t now_ns) {
  const int64_t elapsed_ns = std::max<int64_t>(now_ns - round_start_ns_, 1);
  const double rate = round_copies_ * 1e9 / static_cast<double>(elapsed_ns);
  const double mean_ns = round_sum_ns_ / round_copies_;
  learn(mean_ns, rate, now_ns);
  limit_.store(next_limit(limit_.load(std::memory_order_relaxed), mean_ns, now_ns),
               std::memory_order_relaxed);
  rounds_.fetch_add(1, std::memory_order_relaxed);
  round_start_ns_ = now_ns;
  round_sum_ns_ = 0;
  round_copies_ = 0;
  round_busy_ = true;
}

void CopyConcurrency::learn(double mean_ns, double rate, int64_t now_ns) {
  if (probe_since_ns_ != 0) {
    learn_probe(now_ns);  // its rounds are held low on purpose: they say nothing of the rate
    return;
  }
  if (base_ns_ == 0 || mean_ns <= base_ns_) {
    base_ns_ = mean_ns;
    base_at_ns_ = now_ns;
  }
  if (round_busy_) {
    rate_ = rate_ == 0 ? rate : rate_ + kRateWeight * (rate - rate_);
  }
}

// The probe measures the copies started after it lowered the limit, once a round's worth have
// ended: the copies started before it were queued behind the gain's headroom. A probe that
// gets too few in kProbeMaxNs (staging ran dry) ends with what it has.
void CopyConcurrency::learn_probe(int64_t now_ns) {
  const unsigned enough = std::max(1u, limit_.load(std::memory_order_relaxed));
  if (probe_copies_ < enough && now_ns - probe_since_ns_ < kProbeMaxNs) {
    return;
  }
  if (probe_copies_ > 0) {
    base_ns_ = probe_sum_ns_ / probe_copies_;
  }
  base_at_ns_ = now_ns;
  probe_since_ns_ = 0;
  probe_sum_ns_ = 0;
  probe_copies_ = 0;
}

unsigned CopyConcurrency::next_limit(unsigned limit, double mean_ns, int64_t now_ns) {
  if (rate_ == 0) {
    return limit;  // no busy round yet: nothing learned about more copies
  }
  const double product = rate_ * base_ns_ / 1e9;
  // Copies slower than the gain's own queue explains: the source got slower, and a stale base
  // would shrink the limit round after round until the next probe.
  const bool stale = mean_ns > kStale * base_ns_;
  if (probe_since_ns_ == 0 && (stale || now_ns - base_at_ns_ > kWindowNs)) {
    probe_since_ns_ = now_ns;
  }
  return clamped(probe_since_ns_ != 0 ? kProbeShare * product : kGain * product);
}

unsigned CopyConcurrency::clamped(double limit) const {
  const auto floor = static_cast<double>(std::min(kMin, max_));
  return static_cast<unsigned>(std::clamp(std::ceil(limit), floor, static_cast<double>(max_)));
}

}  // namespace epochfs::prefetch
