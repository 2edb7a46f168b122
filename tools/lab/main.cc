// epochfs-lab: the benchmark, the eviction-policy simulation and the demo. Not part of the
// shipped product: it runs the `epochfs` binary and the fixture filesystems built next to it.
#include <stdio.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "test/fixtures/slowfs/presets.h"
#include "tools/cli/subcommand.h"
#include "tools/lab/commands.h"

namespace {

using epochfs::tools::Subcommand;
namespace tools = epochfs::tools;

Subcommand add_bench(CLI::App& app) {
  auto o = std::make_shared<tools::BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench", "A trainer over emulated shared storage, every strategy side by side");
  cmd->add_option("--dir", o->dir, "Work directory (default: a new temporary one)");
  cmd->add_option("--files", o->files, "Files in the emulated dataset")
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}));
  cmd->add_option("--mean-kb", o->mean_kb, "Mean file size")->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--epochs", o->epochs, "Epochs to train")
      ->check(CLI::Range(size_t{1}, size_t{100}));
  cmd->add_option("--seed", o->seed, "Seed of the dataset and the shuffles");
  cmd->add_option("--batch", o->trainer.batch, "Samples per mini-batch")
      ->check(CLI::Range(size_t{1}, size_t{65536}));
  cmd->add_option("--workers", o->trainer.workers, "Loader threads")->check(CLI::Range(1, 256));
  cmd->add_option("--compute-ms", o->trainer.compute_ms, "Emulated GPU time per batch")
      ->check(CLI::Range(0.0, 1e5));
  cmd->add_option("--source", o->source, "Shared storage: emulated or gluster")
      ->check(CLI::IsMember({"emulated", "gluster"}));
  std::vector<std::string> presets;
  for (const auto& p : epochfs::slowfs::kStoragePresets) {
    presets.emplace_back(p.name);
  }
  cmd->add_option("--storage", o->storage, "Emulated storage preset")
      ->check(CLI::IsMember(presets));
  cmd->add_option("--latency-ms", o->latency_ms, "Override: per open and read request")
      ->check(CLI::Range(0.0, 1e4));
  cmd->add_option("--meta-latency-ms", o->meta_latency_ms, "Override: per lookup")
      ->check(CLI::Range(0.0, 1e4));
  cmd->add_option("--bandwidth-mbs", o->bandwidth_mbs, "Override: link MB/s (0: none)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--max-inflight", o->max_inflight, "Override: requests at once")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--cache-fraction", o->cache_fractions,
                  "Cache sizes for lru and epochfs, as fractions of the dataset (1,0.5)")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--stage-threads", o->stage_threads, "epochfs mount --stage-threads")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file");
  cmd->add_option("--plot", o->plot, "And plot samples/s per epoch to this PNG (gnuplot)");
  cmd->add_option("--scenarios", o->scenarios, "ideal,direct,lru,copy,epochfs")
      ->delimiter(',')
      ->check(CLI::IsMember({"ideal", "direct", "lru", "copy", "epochfs"}));

  return {cmd, [o] { return tools::cmd_bench(*o); }};
}

Subcommand add_bench_policy(CLI::App& app) {
  auto o = std::make_shared<tools::BenchPolicyOptions>();
  auto* cmd = app.add_subcommand(
      "bench-policy", "Hit rates of the eviction policies on shuffled epochs (simulation)");
  cmd->add_option("--files", o->files, "Files in the dataset")
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}));
  cmd->add_option("--epochs", o->epochs, "Epochs to simulate")->check(CLI::Range(2, 100));
  cmd->add_option("--cache", o->fractions, "Cache sizes as fractions of the dataset")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--memory-files", o->memory_files, "Files for the memory figures (0: skip)");

  return {cmd, [o] { return tools::cmd_bench_policy(*o); }};
}

Subcommand add_bench_tree(CLI::App& app) {
  auto o = std::make_shared<tools::BenchTreeOptions>();
  auto* cmd = app.add_subcommand(
      "bench-tree", "An ImageNet-sized tree through a mount: start, publish, memory, unmount");
  cmd->add_option("--dir", o->dir, "Work directory (default: a new temporary one)");
  cmd->add_option("--files", o->files, "Files in the tree")
      ->default_val(o->files)
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}));
  cmd->add_option("--classes", o->classes, "Directories")
      ->default_val(o->classes)
      ->check(CLI::Range(size_t{1}, size_t{1'000'000}));
  cmd->add_option("--mean-kb", o->mean_kb, "Mean file size in KB (lognormal)")
      ->default_val(o->mean_kb)
      ->check(CLI::Range(0.01, 1e6));
  cmd->add_option("--threads", o->threads, "Reader threads")
      ->default_val(o->threads)
      ->check(CLI::Range(1, 256));
  cmd->add_option("--seed", o->seed, "Seed of the dataset and the shuffles");
  cmd->add_option("--json", o->json, "Also write the figures as JSON to this file");

  return {cmd, [o] { return tools::cmd_bench_tree(*o); }};
}

Subcommand add_demo(CLI::App& app) {
  auto o = std::make_shared<tools::DemoOptions>();
  auto* cmd = app.add_subcommand("demo", "Read a sample dataset through a mount and directly");
  cmd->add_option("--dir", o->dir, "Work directory (default: a new temporary one)");
  cmd->add_option("--files", o->files, "Number of files")->default_val(o->files);
  cmd->add_option("--mean-kb", o->mean_kb, "Mean file size in KB (lognormal)")
      ->default_val(o->mean_kb)
      ->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--threads", o->threads, "Reader thread counts")->delimiter(',');
  cmd->add_option("--rounds", o->rounds, "Rounds per figure (median)")->default_val(3);
  cmd->add_flag("--immutable,!--no-immutable", o->immutable, "Mount with --immutable");
  cmd->add_flag("--keep", o->keep, "Keep the work directory");
  cmd->add_flag("--cold", o->cold,
                "Drop the page cache before every pass (root); also measures the first read");
  cmd->add_flag("--cold-pages", o->pages_only,
                "With --cold: drop only file pages, keep dentries and inodes cached");
  cmd->add_flag("--no-cache", o->no_cache, "Mount without the local-disk cache");
  cmd->add_option("--peer", o->peers,
                  "Also read through a peer mounted over the same source: bindfs, "
                  "mergerfs, rclone (--vfs-cache-mode full)")
      ->check(CLI::IsMember({"bindfs", "mergerfs", "rclone"}))
      ->delimiter(',');
  cmd->add_option("--mount-arg", o->mount_args, "Extra argument for epochfs mount")
      ->allow_extra_args(false);
  cmd->add_option("--round-trips", o->round_trips,
                  "Also time this many fstat() calls on one file (a request each with "
                  "--no-immutable --mount-arg=--attr-timeout=0)");

  return {cmd, [o] { return tools::cmd_demo(*o); }};
}

int run(int argc, char** argv) {
  CLI::App app{"epochfs-lab: benchmarks and the demo of epochfs (not installed)"};
  app.require_subcommand(1);
  const std::vector<Subcommand> commands = {add_bench(app), add_bench_policy(app),
                                            add_bench_tree(app), add_demo(app)};
  CLI11_PARSE(app, argc, argv);
  return tools::run_parsed(commands);
}

}  // namespace

int main(int argc, char** argv) { return epochfs::tools::run_main("epochfs-lab", run, argc, argv); }
