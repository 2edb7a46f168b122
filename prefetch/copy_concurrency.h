// CopyConcurrency: how many prefetch copies to keep in flight, learned from the copies
// themselves.
//
// Copies share the source's link, its server's threads and this node's cores. Too few in
// flight leave the link idle while each copy waits for its open; too many split it so finely
// that the copy a reader waits for finishes late: with a fixed 256 (twice the 128 threads), an
// epoch whose order came as it started had readers waiting 15-20 ms per file for copies
// already running. The right number is the source's throughput times an uncontended copy's
// time (Little's law), which no setting knows in advance and which changes with the source's
// load.
//
// So it is measured per round (as many copies as the limit), as TCP's BBR does for packets:
// the rate is the copies/s of recent rounds that kept (nearly) every slot busy, averaged
// (kRateWeight) against their noise; the base time is the lowest mean copy time; the limit is
// kGain times their product. The gain is the headroom that lets a higher rate show: where
// more copies end sooner (a fast link, a slow open), each round's rate is the limit over the
// base, and the limit grows up to kGain-fold a round until the link (or the server, or this node's
// cores) holds the rate; there it stays at kGain times what fills the link. Rounds with idle
// slots (the planner had nothing more to stage) say nothing about the rate.
//
// With the gain's headroom in flight, copies queue behind each other and take longer than the
// base, so the base cannot be learned again from those rounds. Every kWindowNs the limit drops
// to kProbeShare of the product (below it, so that no copy queues) until a round's worth of
// copies started after the drop have ended, and their mean becomes the base: a source that got
// slower or faster is learned again. The copies started before the drop are left out: they
// were queued behind the headroom, and counting them would ratchet the base, and the limit,
// up at every probe. A round whose copies took over kStale bases (more than the headroom's
// queue explains: the source got slower) starts a probe at once; a stale base would shrink the
// limit round after round until the next.
//
// Measured: docs/benchmarks.md, "The order published as the epoch starts".
//
// Thread-safety: finished() from any copy thread; limit() from anywhere.
#pragma once

#include <atomic>
#include <cstdint>

#include "cachestore/sync.h"

namespace epochfs::prefetch {

class CopyConcurrency {
 public:
  static constexpr unsigned kInitial = 8;
  static constexpr unsigned kMin = 2;
  static constexpr double kGain = 2;
  static constexpr double kRateWeight = 0.5;
  static constexpr int64_t kWindowNs = 5'000'000'000;
  static constexpr double kProbeShare = 0.5;
  static constexpr int64_t kProbeMaxNs = 1'000'000'000;
  static constexpr double kStale = 3;

  // max: the copy threads (more in flight would only queue).
  explicit CopyConcurrency(unsigned max);

  unsigned limit() const { return limit_.load(std::memory_order_relaxed); }

  // A prefetch copy ended at now_ns after duration_ns (from the source's open); busy: (nearly)
  // every slot had a copy in flight, so the planner had more to stage.
  void finished(int64_t duration_ns, int64_t now_ns, bool busy);

  // Rounds measured, for tests.
  uint64_t rounds() const { return rounds_.load(std::memory_order_relaxed); }

 private:
  const unsigned max_;
  std::atomic<unsigned> limit_;
  std::atomic<uint64_t> rounds_{0};
  cachestore::Mutex mu_;
  // The round being measured.
  int64_t round_start_ns_ GUARDED_BY(mu_) = 0;
  double round_sum_ns_ GUARDED_BY(mu_) = 0;
  unsigned round_copies_ GUARDED_BY(mu_) = 0;
  bool round_busy_ GUARDED_BY(mu_) = true;
  // What the rounds showed.
  double rate_ GUARDED_BY(mu_) = 0;     // copies per second, averaged; 0: none yet
  double base_ns_ GUARDED_BY(mu_) = 0;  // mean copy time, lowest; 0: none yet
  int64_t base_at_ns_ GUARDED_BY(mu_) = 0;
  // A probe of the base under way since then (0: none), and its copies so far.
  int64_t probe_since_ns_ GUARDED_BY(mu_) = 0;
  double probe_sum_ns_ GUARDED_BY(mu_) = 0;
  unsigned probe_copies_ GUARDED_BY(mu_) = 0;

  void end_round(int64_t now_ns) REQUIRES(mu_);
  void learn(double mean_ns, double rate, int64_t now_ns) REQUIRES(mu_);
  void learn_probe(int64_t now_ns) REQUIRES(mu_);
  unsigned next_limit(unsigned limit, double mean_ns, int64_t now_ns) REQUIRES(mu_);
  unsigned clamped(double limit) const;
};

}  // namespace epochfs::prefetch
