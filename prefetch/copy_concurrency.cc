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
  round_sum_ns_ += static_cast<double>(std::max<int64_t>(duration_ns, 1));
  round_busy_ = round_busy_ && busy;
  if (++round_copies_ >= limit_.load(std::memory_order_relaxed)) {
    end_round(now_ns);
  }
}

void CopyConcurrency::end_round(int64_t now_ns) {
  const int64_t elapsed_ns = std::max<int64_t>(now_ns - round_start_ns_, 1);
  const double rate = round_copies_ * 1e9 / static_cast<double>(elapsed_ns);
  learn(round_sum_ns_ / round_copies_, rate, now_ns);
  limit_.store(next_limit(limit_.load(std::memory_order_relaxed), now_ns),
               std::memory_order_relaxed);
  rounds_.fetch_add(1, std::memory_order_relaxed);
  round_start_ns_ = now_ns;
  round_sum_ns_ = 0;
  round_copies_ = 0;
  round_busy_ = true;
}

void CopyConcurrency::learn(double mean_ns, double rate, int64_t now_ns) {
  const bool measuring = probe_rounds_ == 1;
  if (base_ns_ == 0 || mean_ns <= base_ns_ || measuring) {
    base_ns_ = mean_ns;
    base_at_ns_ = now_ns;
  }
  if (round_busy_) {
    rate_ = rate_ == 0 ? rate : rate_ + kRateWeight * (rate - rate_);
  }
  if (probe_rounds_ > 0) {
    --probe_rounds_;
  }
}

unsigned CopyConcurrency::next_limit(unsigned limit, int64_t now_ns) {
  if (rate_ == 0) {
    return limit;  // no busy round yet: nothing learned about more copies
  }
  const double product = rate_ * base_ns_ / 1e9;
  if (probe_rounds_ == 0 && now_ns - base_at_ns_ > kWindowNs) {
    probe_rounds_ = 2;
  }
  return clamped(probe_rounds_ > 0 ? kProbeShare * product : kGain * product);
}

unsigned CopyConcurrency::clamped(double limit) const {
  const auto floor = static_cast<double>(std::min(kMin, max_));
  return static_cast<unsigned>(std::clamp(std::ceil(limit), floor, static_cast<double>(max_)));
}

}  // namespace epochfs::prefetch
