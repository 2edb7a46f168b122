// The `epochfs` subcommands. Each returns the process exit code and prints its own errors
// as one line on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusefs/mount_options.h"
#include "tools/trainer.h"

namespace epochfs::tools {

int cmd_mount(fusefs::MountOptions options);

// Unmounts; unless lazy, waits for the daemon to exit, so its cache directory is gone when
// this returns.
int cmd_unmount(const std::string& mountpoint, bool lazy);

int cmd_stats(const std::string& mountpoint, bool json);

struct DoctorOptions {
  std::string path;  // a mount, or a source directory to be mounted; may be empty
  std::string fuse_device = "/dev/fuse";
  std::string cache_dir;          // empty: the mount's, or epochfs mount's default
  uint64_t cache_size_bytes = 0;  // 0: not given
  double cache_reserve_percent = 5;
  bool no_cache = false;
};

// `epochfs doctor`: checks the FUSE device, privileges, kernel, open-files limit, the source's
// latency or a mount's health, and the cache disk; one line each with what to fix. Exits 1 if
// any check found a problem (tools/cmd_doctor.cc).
int cmd_doctor(const DoctorOptions& options);

struct CleanOptions {
  std::string cache_dir;
  bool dry_run = false;
};

// `epochfs clean`: lists the directories dead mounts left under cache_dir, with their sizes,
// and removes them unless dry_run; one line each and a total. Never a live mount's directory,
// never anything that is not epochfs's. Exits 1 only if one could not be removed
// (tools/cmd_clean.cc).
int cmd_clean(const CleanOptions& options);

// `epochfs stats MOUNT --watch`: a live view refreshed every interval_s, count times (0: until
// interrupted); redrawn on a terminal, plain lines elsewhere (tools/cmd_watch.cc).
int cmd_watch(const std::string& mountpoint, unsigned count, double interval_s);

// Checks every cached copy against the hash recorded when it was made; damaged copies are
// dropped by the daemon.
int cmd_verify(const std::string& mountpoint);

struct PublishOptions {
  std::string mountpoint;
  std::string file;
  std::optional<uint64_t> epoch;
  std::string stream;
  bool manifest = false;
};

// Publishes a shuffle file (or with manifest, the manifest) to a mount; prints the daemon's
// verdict. Fails if the order was refused.
int cmd_publish(const PublishOptions& options);

struct BenchOptions {
  std::string dir;  // work dir (dataset reused if it matches); a new temporary one if empty
  size_t files = 5000;
  double mean_kb = 110;
  size_t epochs = 3;
  uint64_t seed = 1;
  TrainerSpec trainer;
  // The shared storage: "emulated" (epochfs-slowfs) or "gluster" (tools/gluster/).
  std::string source = "emulated";
  // A preset of tools/slowfs/presets.h; the four below override its settings where >= 0.
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

// A trainer over emulated shared storage, every strategy side by side (tools/cmd_bench.cc).
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
};

int cmd_demo(const DemoOptions& options);

}  // namespace epochfs::tools
