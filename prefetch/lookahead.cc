#include "prefetch/lookahead.h"

#include <algorithm>
#include <cmath>

namespace epochfs::prefetch {
namespace {

// Before anything was measured: a network file system's copy of a small file.
constexpr double kInitialCopyLatencyS = 0.005;
constexpr double kInitialFileBytes = 128 * 1024;

}  // namespace

double mean_file_bytes(const WindowInputs& in) {
  // Empty files measured so far must not make the mean 0 (a divisor).
  return in.mean_file_bytes ? std::max(1.0, *in.mean_file_bytes) : kInitialFileBytes;
}

uint64_t window_files(const Lookahead& lookahead, const WindowInputs& in) {
  const uint64_t threads = in.stage_threads;
  const double mean_bytes = mean_file_bytes(in);
  uint64_t files = 0;
  switch (lookahead.kind) {
    case Lookahead::Kind::kFiles:
      if (lookahead.amount == 0) {
        return 0;
      }
      files = lookahead.amount;
      break;
    case Lookahead::Kind::kBytes:
      files = static_cast<uint64_t>(static_cast<double>(lookahead.amount) / mean_bytes);
      break;
    case Lookahead::Kind::kAuto: {
      const double latency = in.copy_latency_s.value_or(kInitialCopyLatencyS);
      files = std::max<uint64_t>(
          2 * threads, static_cast<uint64_t>(std::ceil(2 * in.rate_files_s * latency)) + threads);
      break;
    }
  }
  if (in.cache_capacity != UINT64_MAX) {
    files = std::min<uint64_t>(
        files, static_cast<uint64_t>(static_cast<double>(in.cache_capacity) / 2 / mean_bytes));
  }
  return std::max<uint64_t>(1, files);
}

}  // namespace epochfs::prefetch
