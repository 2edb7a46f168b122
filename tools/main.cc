// epochfs: the command line. Exceptions (CLI11's) are caught here and nowhere below.
#include <stdio.h>
#include <sys/stat.h>

#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cachestore/log.h"
#include "tools/cli_docs.h"
#include "tools/commands.h"
#include "tools/mount_helper.h"
#include "tools/mount_table.h"
#include "tools/size_parse.h"
#include "tools/slowfs/presets.h"

namespace {

using epochfs::fusefs::MountOptions;

// Timeouts for datasets that never change while mounted: one day.
constexpr double kImmutableTimeoutS = 86400;

struct CacheFlags {
  std::string size = "unlimited";
  std::string reserve = "5%";
  std::string lookahead = "auto";
  bool disabled = false;
};

// A shared mount's jobs and users (prefetch/jobs.h, docs/semantics.md).
void add_job_options(CLI::App* cmd, epochfs::prefetch::JobLimits& limits) {
  cmd->add_option("--max-streams-per-job", limits.streams_per_job,
                  "Streams (ranks, loaders) one job may hold; a publish past it is refused")
      ->default_val(limits.streams_per_job)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-jobs-per-user", limits.jobs_per_user,
                  "Jobs with published orders one user may hold at once")
      ->default_val(limits.jobs_per_user)
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-entries-per-user", limits.entries_per_user,
                  "Order and manifest entries one user's jobs may hold (8 and 4 bytes each)")
      ->default_val(limits.entries_per_user)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 31));
  cmd->add_option("--job-idle-timeout", limits.idle_timeout_s,
                  "Seconds without a publish or an open of its files after which a job ends, "
                  "even if its processes still run")
      ->default_val(limits.idle_timeout_s)
      ->check(CLI::Range(1.0, 1e9));
}

// When the shared storage stops answering (prefetch/source_guard.h, docs/semantics.md).
void add_outage_options(CLI::App* cmd, epochfs::prefetch::EngineOptions& engine) {
  cmd->add_option("--source-timeout", engine.source.timeout_s,
                  "Seconds a call into the source may take before the source counts as down "
                  "(cached files are then served from the cache)")
      ->default_val(engine.source.timeout_s)
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_option("--outage-wait", engine.source.outage_wait_s,
                  "Seconds a read of an uncached file waits for a source that is down before "
                  "it fails with EIO")
      ->default_val(engine.source.outage_wait_s)
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--outage", engine.serve_cached_in_outage,
                  "serve: while the source is down, files cached at the version last checked "
                  "are served (always so with --immutable); fail: they fail like the others")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, bool>{{"serve", true}, {"fail", false}}, CLI::ignore_case))
      ->option_text("serve|fail")
      ->default_str("serve");
}

void add_cache_options(CLI::App* cmd, MountOptions& o, CacheFlags& flags) {
  o.cache.root = "/var/cache/epochfs";
  cmd->add_option("--cache-dir", o.cache.root,
                  "Local directory for cached copies (each mount uses its own subdirectory)")
      ->default_val(o.cache.root);
  cmd->add_option("--cache-size", flags.size,
                  "Bytes the cache may use on disk, e.g. 300G (default: what the free-space "
                  "reserve allows)");
  cmd->add_option("--cache-reserve", flags.reserve,
                  "Free space to leave on the cache filesystem, in percent")
      ->default_val(flags.reserve);
  cmd->add_flag("--no-cache", flags.disabled, "Read everything from the source");
  cmd->add_flag("--keep-cache", o.cache.keep,
                "Keep the cached copies at unmount for the next mount of the same source "
                "(each is verified before its first use)");
  cmd->add_option("--stage-threads", o.engine.stage_threads,
                  "Copies into the cache run at once (reads in flight on the source)")
      ->default_val(o.engine.stage_threads)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--lookahead", flags.lookahead,
                  "How far ahead of the trainer to stage: a number of files, a size (e.g. 2G), "
                  "auto (the consumption rate times the copy latency, twice over), or 0 (no "
                  "prefetch: the published orders only decide what the cache keeps)")
      ->default_val(flags.lookahead);
  cmd->add_option("--reorder-window", o.engine.reorder_window,
                  "Entries a stream's opens may come out of its order: the samples a loader holds "
                  "in flight (workers x batch size x prefetch factor); skipped beyond it")
      ->default_val(o.engine.reorder_window)
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 24));
  add_job_options(cmd, o.engine.limits);
  cmd->add_option("--shuffle-file", o.engine.shuffle_file,
                  "A shuffle file outside the mount, published at mount and again at each new "
                  "version (write it elsewhere, then rename it onto PATH)");
}

// "auto", a count of files ("5000") or a size ("2G").
std::optional<epochfs::prefetch::Lookahead> parse_lookahead(const std::string& text) {
  using epochfs::prefetch::Lookahead;
  if (text == "auto") {
    return Lookahead{};
  }
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return Lookahead{Lookahead::Kind::kFiles, std::stoull(text)};
  }
  auto bytes = epochfs::tools::parse_size(text);
  if (!bytes || *bytes == 0) {
    return std::nullopt;
  }
  return Lookahead{Lookahead::Kind::kBytes, *bytes};
}

// Fills o.cache from the flags; false (with a message) if one is malformed.
bool apply_cache_flags(const CacheFlags& flags, MountOptions& o) {
  if (flags.disabled) {
    o.cache.capacity_bytes = 0;
  } else if (flags.size != "unlimited") {
    auto size = epochfs::tools::parse_size(flags.size);
    if (!size) {
      fprintf(stderr, "epochfs: --cache-size %s: expected a size such as 300G\n",
              flags.size.c_str());
      return false;
    }
    o.cache.capacity_bytes = *size;
  }
  auto reserve = epochfs::tools::parse_percent(flags.reserve);
  if (!reserve) {
    fprintf(stderr, "epochfs: --cache-reserve %s: expected a percentage such as 5%%\n",
            flags.reserve.c_str());
    return false;
  }
  o.cache.reserve_fraction = *reserve;
  auto lookahead = parse_lookahead(flags.lookahead);
  if (!lookahead) {
    fprintf(stderr, "epochfs: --lookahead %s: expected auto, a number of files or a size\n",
            flags.lookahead.c_str());
    return false;
  }
  o.engine.lookahead = *lookahead;
  if (!o.metrics_file.empty()) {
    // The daemon changes directory when it detaches: keep the path absolute.
    o.metrics_file = epochfs::tools::absolute_path(o.metrics_file);
  }
  if (!o.engine.shuffle_file.empty()) {
    // The daemon changes directory when it detaches: keep the path absolute.
    o.engine.shuffle_file = epochfs::tools::absolute_path(o.engine.shuffle_file);
    const std::string dir = o.engine.shuffle_file.substr(0, o.engine.shuffle_file.rfind('/'));
    struct stat st;
    if (::stat(dir.empty() ? "/" : dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "epochfs: --shuffle-file %s: its directory does not exist\n",
              o.engine.shuffle_file.c_str());
      return false;
    }
  }
  return true;
}

CLI::App* add_mount_command(CLI::App& app, MountOptions& o, std::string& log_level) {
  auto* cmd = app.add_subcommand("mount", "Mount SOURCE read-only at MOUNTPOINT");
  cmd->add_option("source", o.source, "Directory to overlay (shared storage)")->required();
  cmd->add_option("mountpoint", o.mountpoint, "Where to mount it")->required();
  cmd->add_flag("-f,--foreground", o.foreground, "Stay in the foreground");
  cmd->add_flag("-d,--debug", o.debug, "Log every FUSE request (implies --foreground)");
  cmd->add_option("--threads", o.threads, "Maximum FUSE worker threads")
      ->default_val(o.threads)
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--allow-other", o.allow_other,
                "Let other users in (with default_permissions: the kernel checks modes)");
  cmd->add_option("--attr-timeout", o.fs.attr_timeout_s,
                  "Seconds the kernel caches names and attributes")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--negative-timeout", o.fs.negative_timeout_s,
                  "Seconds the kernel remembers that a name does not exist")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--immutable", o.fs.immutable,
                "The source never changes while mounted: cache names, attributes and pages "
                "for a day");
  cmd->add_option("--data-path", o.data_path,
                  "classic: every read comes to the daemon; passthrough: the kernel reads "
                  "cached copies itself where it can (Linux 6.9+, root), else classic; auto: "
                  "passthrough where it can, else classic; no-open: the kernel opens files "
                  "without asking and keeps their pages (hot files never reach the daemon)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, epochfs::fusefs::DataPath>{
              {"auto", epochfs::fusefs::DataPath::kAuto},
              {"classic", epochfs::fusefs::DataPath::kClassic},
              {"passthrough", epochfs::fusefs::DataPath::kPassthrough},
              {"no-open", epochfs::fusefs::DataPath::kNoOpen}},
          CLI::ignore_case))
      ->option_text("auto|classic|passthrough|no-open");
  add_outage_options(cmd, o.engine);
  cmd->add_option("--metrics-file", o.metrics_file,
                  "Write Prometheus metrics to this file every 5 s (node_exporter textfile)");
  cmd->add_option("-o", o.fuse_options, "Standard FUSE mount options (comma-separated)")
      ->allow_extra_args(false);
  cmd->add_option("--log-file", o.log_file,
                  "Log here instead of syslog (in the background) or stderr (in the foreground)");
  cmd->add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}));
  return cmd;
}

epochfs::cachestore::LogLevel parse_level(const std::string& s) {
  using epochfs::cachestore::LogLevel;
  if (s == "error") return LogLevel::kError;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "debug") return LogLevel::kDebug;
  return LogLevel::kInfo;
}

int run(int argc, char** argv) {
  CLI::App app{"epochfs: a read-only FUSE overlay that stages training data on local disk"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("epochfs ") + EPOCHFS_VERSION);
  MountOptions mount;
  std::string log_level = "info";
  CacheFlags cache_flags;
  CLI::App* mount_cmd = add_mount_command(app, mount, log_level);
  add_cache_options(mount_cmd, mount, cache_flags);

  std::string unmount_path;
  bool lazy = false;
  auto* unmount = app.add_subcommand("unmount", "Unmount an epochfs mount");
  unmount->add_option("mountpoint", unmount_path, "The epochfs mount to unmount")->required();
  unmount->add_flag("-l,--lazy", lazy, "Detach now; finish when the last file is closed");

  std::string stats_path;
  bool stats_json = false;
  auto* stats = app.add_subcommand("stats", "Show a mount's statistics");
  stats->add_option("mountpoint", stats_path, "An epochfs mount")->required();
  stats->add_flag("--json", stats_json, "Print the raw JSON document");
  bool stats_watch = false;
  unsigned watch_count = 0;
  double watch_interval = 1;
  stats->add_flag("--watch", stats_watch, "A live view, refreshed every second");
  stats->add_option("--count", watch_count, "With --watch: stop after this many refreshes");
  stats->add_option("--interval", watch_interval, "With --watch: seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));

  std::string verify_path;
  auto* verify = app.add_subcommand("verify", "Check every cached copy against its hash");
  verify->add_option("mountpoint", verify_path, "An epochfs mount")->required();

  epochfs::tools::DoctorOptions doctor;
  std::string doctor_size;
  std::string doctor_reserve = "5%";
  auto* doctor_cmd = app.add_subcommand(
      "doctor", "Check the node, a source or a mount, and the cache disk; say what to fix");
  doctor_cmd->add_option("path", doctor.path, "A mount, or the source you mean to mount");
  doctor_cmd->add_option("--cache-dir", doctor.cache_dir,
                         "The cache directory you mean to use (default: the mount's, or "
                         "/var/cache/epochfs)");
  doctor_cmd->add_option("--cache-size", doctor_size, "The --cache-size you mean to use");
  doctor_cmd->add_option("--cache-reserve", doctor_reserve, "The --cache-reserve you mean to use");
  doctor_cmd->add_flag("--no-cache", doctor.no_cache, "Skip the cache disk checks");
  doctor_cmd->add_option("--fuse-device", doctor.fuse_device, "The FUSE device to check")
      ->default_val(doctor.fuse_device);

  epochfs::tools::CleanOptions clean;
  auto* clean_cmd = app.add_subcommand(
      "clean", "Remove what dead mounts left in a cache directory (for a Slurm epilog or cron)");
  clean_cmd->add_option("--cache-dir", clean.cache_dir, "The cache directory to clean")->required();
  clean_cmd->add_flag("--dry-run", clean.dry_run, "List what would be removed; remove nothing");

  epochfs::tools::PublishOptions publish;
  auto* publish_cmd =
      app.add_subcommand("publish", "Publish a shuffle order (or a manifest) to a mount");
  publish_cmd->add_option("mountpoint", publish.mountpoint, "The epochfs mount to publish to")
      ->required();
  publish_cmd->add_option("file", publish.file, "Shuffle file: one path or index per line")
      ->required();
  publish_cmd->add_option("--epoch", publish.epoch, "Epoch number (overrides the file's)");
  publish_cmd->add_option("--stream", publish.stream,
                          "Stream id, one per rank (overrides the file's)");
  publish_cmd->add_flag("--manifest", publish.manifest,
                        "FILE is the manifest that index-form orders refer to");

  epochfs::tools::BenchOptions bench;
  auto* bench_cmd = app.add_subcommand(
      "bench", "A trainer over emulated shared storage, every strategy side by side");
  bench_cmd->add_option("--dir", bench.dir, "Work directory (default: a new temporary one)");
  bench_cmd->add_option("--files", bench.files, "Files in the emulated dataset")
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}));
  bench_cmd->add_option("--mean-kb", bench.mean_kb, "Mean file size")->check(CLI::Range(1.0, 1e6));
  bench_cmd->add_option("--epochs", bench.epochs, "Epochs to train")
      ->check(CLI::Range(size_t{1}, size_t{100}));
  bench_cmd->add_option("--seed", bench.seed, "Seed of the dataset and the shuffles");
  bench_cmd->add_option("--batch", bench.trainer.batch, "Samples per mini-batch")
      ->check(CLI::Range(size_t{1}, size_t{65536}));
  bench_cmd->add_option("--workers", bench.trainer.workers, "Loader threads")
      ->check(CLI::Range(1, 256));
  bench_cmd->add_option("--compute-ms", bench.trainer.compute_ms, "Emulated GPU time per batch")
      ->check(CLI::Range(0.0, 1e5));
  bench_cmd->add_option("--source", bench.source, "Shared storage: emulated or gluster")
      ->check(CLI::IsMember({"emulated", "gluster"}));
  std::vector<std::string> presets;
  for (const auto& p : epochfs::slowfs::kStoragePresets) {
    presets.emplace_back(p.name);
  }
  bench_cmd->add_option("--storage", bench.storage, "Emulated storage preset")
      ->check(CLI::IsMember(presets));
  bench_cmd->add_option("--latency-ms", bench.latency_ms, "Override: per open and read request")
      ->check(CLI::Range(0.0, 1e4));
  bench_cmd->add_option("--meta-latency-ms", bench.meta_latency_ms, "Override: per lookup")
      ->check(CLI::Range(0.0, 1e4));
  bench_cmd->add_option("--bandwidth-mbs", bench.bandwidth_mbs, "Override: link MB/s (0: none)")
      ->check(CLI::Range(0.0, 1e6));
  bench_cmd->add_option("--max-inflight", bench.max_inflight, "Override: requests at once")
      ->check(CLI::Range(1, 100000));
  bench_cmd
      ->add_option("--cache-fraction", bench.cache_fractions,
                   "Cache sizes for lru and epochfs, as fractions of the dataset (1,0.5)")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 1.0));
  bench_cmd->add_option("--stage-threads", bench.stage_threads, "epochfs mount --stage-threads")
      ->check(CLI::Range(1, 1024));
  bench_cmd->add_option("--json", bench.json, "Also write the results as JSON to this file");
  bench_cmd->add_option("--plot", bench.plot, "And plot samples/s per epoch to this PNG (gnuplot)");
  bench_cmd->add_option("--scenarios", bench.scenarios, "ideal,direct,lru,copy,epochfs")
      ->delimiter(',')
      ->check(CLI::IsMember({"ideal", "direct", "lru", "copy", "epochfs"}));

  epochfs::tools::BenchPolicyOptions bench_policy;
  auto* bench_policy_cmd = app.add_subcommand(
      "bench-policy", "Hit rates of the eviction policies on shuffled epochs (simulation)");
  bench_policy_cmd->add_option("--files", bench_policy.files, "Files in the dataset")
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}));
  bench_policy_cmd->add_option("--epochs", bench_policy.epochs, "Epochs to simulate")
      ->check(CLI::Range(2, 100));
  bench_policy_cmd
      ->add_option("--cache", bench_policy.fractions, "Cache sizes as fractions of the dataset")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  bench_policy_cmd->add_option("--memory-files", bench_policy.memory_files,
                               "Files for the memory figures (0: skip)");

  epochfs::tools::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand("demo", "Read a sample dataset through a mount and directly");
  demo_cmd->add_option("--dir", demo.dir, "Work directory (default: a new temporary one)");
  demo_cmd->add_option("--files", demo.files, "Number of files")->default_val(demo.files);
  demo_cmd->add_option("--mean-kb", demo.mean_kb, "Mean file size in KB (lognormal)")
      ->default_val(demo.mean_kb)
      ->check(CLI::Range(1.0, 1e6));
  demo_cmd->add_option("--threads", demo.threads, "Reader thread counts")->delimiter(',');
  demo_cmd->add_option("--rounds", demo.rounds, "Rounds per figure (median)")->default_val(3);
  demo_cmd->add_flag("--immutable,!--no-immutable", demo.immutable, "Mount with --immutable");
  demo_cmd->add_flag("--keep", demo.keep, "Keep the work directory");
  demo_cmd->add_flag("--cold", demo.cold,
                     "Drop the page cache before every pass (root); also measures the first read");
  demo_cmd->add_flag("--cold-pages", demo.pages_only,
                     "With --cold: drop only file pages, keep dentries and inodes cached");
  demo_cmd->add_flag("--no-cache", demo.no_cache, "Mount without the local-disk cache");
  demo_cmd
      ->add_option("--peer", demo.peers,
                   "Also read through a peer mounted over the same source: bindfs, "
                   "mergerfs, rclone (--vfs-cache-mode full)")
      ->check(CLI::IsMember({"bindfs", "mergerfs", "rclone"}))
      ->delimiter(',');
  demo_cmd->add_option("--mount-arg", demo.mount_args, "Extra argument for epochfs mount")
      ->allow_extra_args(false);

  // The man page and the completion script, from the definitions above (tools/cli_docs.h).
  if (argc == 2 && std::string_view(argv[1]) == "--man") {
    fputs(epochfs::tools::man_page(app).c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::string_view(argv[1]) == "--bash-completion") {
    fputs(epochfs::tools::bash_completion(app).c_str(), stdout);
    return 0;
  }
  // From /etc/fstab (tools/mount_helper.h): parse the `epochfs mount` line it stands for.
  std::vector<std::string> helper_args;
  std::vector<char*> helper_argv;
  if (auto unknown = epochfs::tools::unknown_subcommand(argc, argv, app)) {
    fprintf(stderr, "epochfs: unknown command '%s'%s; see epochfs --help\n", argv[1],
            unknown->empty() ? "" : (" (did you mean '" + *unknown + "'?)").c_str());
    return 2;
  }
  if (epochfs::tools::is_mount_helper_call(argc, argv, app)) {
    auto helper = epochfs::tools::mount_helper_args(argc, argv, *mount_cmd);
    if (!helper) {
      return 1;
    }
    helper_args = std::move(helper->args);
    if (helper->verbose || helper->fake) {
      for (const auto& a : helper_args) {
        fprintf(stderr, "%s ", a.c_str());
      }
      fprintf(stderr, "\n");
    }
    if (helper->fake) {
      return 0;
    }
    for (auto& a : helper_args) {
      helper_argv.push_back(a.data());
    }
    argc = static_cast<int>(helper_argv.size());
    argv = helper_argv.data();
  }
  CLI11_PARSE(app, argc, argv);
  epochfs::cachestore::set_log_level(parse_level(log_level));
  if (app.got_subcommand("mount")) {
    // --immutable lengthens the timeouts the user did not set explicitly.
    auto* cmd = app.get_subcommand("mount");
    if (mount.fs.immutable && cmd->count("--attr-timeout") == 0) {
      mount.fs.attr_timeout_s = kImmutableTimeoutS;
    }
    if (mount.fs.immutable && cmd->count("--negative-timeout") == 0) {
      mount.fs.negative_timeout_s = kImmutableTimeoutS;
    }
    mount.fs.entry_timeout_s = mount.fs.attr_timeout_s;
    mount.engine.immutable = mount.fs.immutable;
    mount.engine.attr_timeout_s = mount.fs.attr_timeout_s;
    if (!apply_cache_flags(cache_flags, mount)) {
      return 1;
    }
    return epochfs::tools::cmd_mount(mount);
  }
  if (app.got_subcommand("stats")) {
    if (stats_watch) {
      return epochfs::tools::cmd_watch(stats_path, watch_count, watch_interval);
    }
    return epochfs::tools::cmd_stats(stats_path, stats_json);
  }
  if (app.got_subcommand("bench")) {
    return epochfs::tools::cmd_bench(bench);
  }
  if (app.got_subcommand("bench-policy")) {
    return epochfs::tools::cmd_bench_policy(bench_policy);
  }
  if (app.got_subcommand("publish")) {
    return epochfs::tools::cmd_publish(publish);
  }
  if (app.got_subcommand("doctor")) {
    const auto size =
        doctor_size.empty() ? std::optional<uint64_t>(0) : epochfs::tools::parse_size(doctor_size);
    const auto reserve = epochfs::tools::parse_percent(doctor_reserve);
    if (!size || !reserve) {
      fprintf(stderr, "epochfs: --cache-size or --cache-reserve: expected 300G, 5%%\n");
      return 1;
    }
    doctor.cache_size_bytes = *size;
    doctor.cache_reserve_percent = *reserve;
    return epochfs::tools::cmd_doctor(doctor);
  }
  if (app.got_subcommand("clean")) {
    return epochfs::tools::cmd_clean(clean);
  }
  if (app.got_subcommand("verify")) {
    return epochfs::tools::cmd_verify(verify_path);
  }
  if (app.got_subcommand("unmount")) {
    return epochfs::tools::cmd_unmount(unmount_path, lazy);
  }
  return epochfs::tools::cmd_demo(demo);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "epochfs: %s\n", e.what());
    return 1;
  }
}
