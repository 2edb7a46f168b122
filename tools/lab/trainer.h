// Trainer emulation for benchmarks: a training loop that consumes mini-batches of n samples
// every t seconds (the GPU's compute, emulated by a sleep) while w loader threads read the
// batches' files ahead of it, as PyTorch's DataLoader does (each worker reads its batch's files
// one after the other; at most prefetch_factor batches per worker are read ahead).
//
// What it measures is what a GPU loses: the time the loop waited for its next batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epochfs::tools {

struct TrainerSpec {
  size_t batch = 32;             // samples per mini-batch
  unsigned workers = 8;          // loader threads
  unsigned prefetch_factor = 2;  // batches read ahead per worker
  double compute_ms = 10;        // per mini-batch
};

struct EpochFigures {
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;  // files that could not be read
  double seconds = 0;   // the epoch's wall time
  double stall_s = 0;   // time the loop waited for batches
  double p50_wait_ms = 0;
  double p99_wait_ms = 0;

  double samples_per_s() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }

  double stall_fraction() const { return seconds > 0 ? stall_s / seconds : 0; }
};

// Runs one epoch over root/paths[order[i]] for i in order.
EpochFigures run_epoch(const std::string& root, const std::vector<std::string>& paths,
                       const std::vector<uint32_t>& order, const TrainerSpec& spec);

// The shuffled order of epoch `epoch` for `files` samples (seeded, as a sampler is).
std::vector<uint32_t> epoch_order(size_t files, uint64_t seed, uint64_t epoch);

// Publishes one epoch's order of root/paths[order[i]] into the mount's control directory;
// false (with a message) if the daemon refused it. Returns once the daemon has taken it.
bool publish_order(const std::string& mnt, const std::vector<std::string>& paths,
                   const std::vector<uint32_t>& order, size_t epoch);

}  // namespace epochfs::tools
