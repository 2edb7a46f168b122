// The `epochfs-lab` subcommands: the benchmark, the policy simulation and the demo. Each
// returns the process exit code and prints its own errors as one line on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/lab/trainer.h"

namespace epochfs::tools {

struct BenchOptions {
  std::string dir;  // work dir (dataset reused if it matches); a new temporary one if empty
  size_t files = 5000;
  double mean_kb = 110;
  size_t epochs = 3;
  uint64_t seed = 1;
  TrainerSpec trainer;
  // The shared storage: "emulated" (epochfs-slowfs) or "gluster" (test/fixtures/gluster/).
  std::string source = "emulated";
  // A preset of test/fixtures/slowfs/presets.h; the four below override its settings where >= 0.
  // With gluster, only the bandwidth applies (the link's rate limit).
  std::string storage = "nfs-10g";
  double latency_ms = -1;
  double meta_latency_ms = -1;
  double bandwidth_mbs = -1;
  int max_inflight = -1;
  // The cache scenarios (lru, epochfs) run once per cache size, as fractions of the dataset.
  std::vector<double> cache_fractions = {1, 0.5};
  unsigned stage_threads = 128;
  std::vector<std::string> scenarios = {"ideal", "direct", "lru", "copy", "epochfs"};
  std::string json;  // also write the results here
  std::string plot;  // and a PNG plot here (needs gnuplot)
};

// A trainer over emulated shared storage, every strategy side by side (tools/lab/cmd_bench.cc).
int cmd_bench(const BenchOptions& options);

struct BenchPolicyOptions {
  size_t files = 100000;
  int epochs = 3;
  std::vector<double> fractions = {0.25, 0.5, 0.75};
  size_t memory_files = 1281167;  // ImageNet-1k's training set; 0 skips the memory figures
};

// Prints the policies' hit rates on shuffled epochs and the memory per file (a simulation
// with the engine's own classes; no mount).
int cmd_bench_policy(const BenchPolicyOptions& options);

struct BenchTreeOptions {
  std::string dir;         // work dir (dataset reused if it matches); a new temporary one if empty
  size_t files = 1281167;  // ImageNet-1k's training set
  size_t classes = 1000;
  double mean_kb = 2;  // small files: the costs measured here are per file, not per byte
  unsigned threads = 8;
  uint64_t seed = 1;
  std::string json;  // also write the figures here
};

// An ImageNet-sized tree through a real mount: mount, publish, memory, opens/s, unmount
// (tools/lab/cmd_bench_tree.cc).
int cmd_bench_tree(const BenchTreeOptions& options);

struct DemoOptions {
  std::string dir;  // work dir; a fresh temporary one if empty
  size_t files = 10000;
  double mean_kb = 110;  // mean file size (lognormal)
  std::vector<unsigned> threads = {1, 8};
  unsigned rounds = 3;
  bool immutable = true;
  bool keep = false;
  // Drop the page cache before every pass (needs root): reads reach the daemon and the disk.
  bool cold = false;
  // With cold: drop file pages only; dentries and inodes stay (no LOOKUP per file).
  bool pages_only = false;
  // Mount with --no-cache: the overlay alone.
  bool no_cache = false;
  // Extra `epochfs mount` arguments, to compare configurations.
  std::vector<std::string> mount_args;
  // Peers mounted over the same source and read in the same rounds: bindfs, mergerfs, rclone.
  std::vector<std::string> peers;
  // fstat() calls timed on one open file of the mount and of the source, after the reads: a
  // request's round trip each, mounted with --no-immutable --attr-timeout 0.
  unsigned round_trips = 0;
};

int cmd_demo(const DemoOptions& options);

}  // namespace epochfs::tools
