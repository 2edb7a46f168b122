// The staging window: how many files ahead of a stream's position the planner keeps staged.
//
// --lookahead gives it as a number of files, as a size (divided by the mean file size seen so
// far), or auto: twice what the stream reads in one copy's time, plus a copy per thread, and
// at least two per thread (so that every thread has a copy running and one queued). Never
// more than half the cache: the rest holds what the order keeps for later.
#pragma once

#include <cstdint>
#include <optional>

namespace epochfs::prefetch {

struct Lookahead {
  enum class Kind { kAuto, kFiles, kBytes } kind = Kind::kAuto;
  uint64_t amount = 0;  // files or bytes; files 0: no prefetch (orders decide eviction only)
};

// What has been measured, and the mount's settings.
struct WindowInputs {
  unsigned stage_threads = 128;
  uint64_t cache_capacity = UINT64_MAX;  // UINT64_MAX: no limit
  double rate_files_s = 0;               // the stream's reads per second; 0 before measured
  std::optional<double> copy_latency_s;  // a copy's mean time; none before the first
  std::optional<double> mean_file_bytes;
};

// The mean file size, or a small file's before anything was measured; never 0.
double mean_file_bytes(const WindowInputs& in);

// Files to keep staged ahead; 0 only for --lookahead 0.
uint64_t window_files(const Lookahead& lookahead, const WindowInputs& in);

}  // namespace epochfs::prefetch
