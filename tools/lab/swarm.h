// A swarm of reader processes, as a DataLoader's workers read a dataset: N processes take the
// next file of an order from a shared counter, read it whole and check its digest. A watchdog
// fails the run if any process goes too long without finishing a file (a hung mount), and
// kills the swarm then, so a test never hangs on it. For the reliability tests and benchmarks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace epochfs::tools {

struct SwarmSpec {
  std::vector<std::string> paths;  // absolute, in the order to read them
  std::vector<uint64_t> digests;   // the XXH64 (seed 0) each file must have, same order
  unsigned processes = 16;
  // A process that finishes no file for this long is stuck (docs/reliability.md: 20 s, as
  // mountpoint-s3's stress watchdog).
  std::chrono::milliseconds stall_limit = std::chrono::seconds(20);
};

struct SwarmResult {
  uint64_t files = 0;                 // files read whole with the right digest
  uint64_t bytes = 0;                 // bytes of those files
  uint64_t wrong = 0;                 // files read whole with another digest
  uint64_t errors = 0;                // files whose open or read failed
  double longest_wait_s = 0;          // the longest any process went without finishing a file
  bool stalled = false;               // a process went past stall_limit: the swarm was killed
  std::vector<std::string> problems;  // the first few: "PATH: wrong bytes", "PATH: errno text"
};

SwarmResult run_swarm(const SwarmSpec& spec);

}  // namespace epochfs::tools
