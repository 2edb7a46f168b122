// `epochfs mount`'s command line: its options, grouped as the man page shows them, and the
// values CLI11 cannot check itself (sizes, percentages, the lookahead, paths the daemon
// needs absolute once it has detached).
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cachestore/log.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/size_parse.h"
#include "tools/cli/subcommand.h"
#include "tools/cli/usage.h"

namespace epochfs::tools {
namespace {

using fusefs::MountOptions;

// Timeouts for datasets that never change while mounted: one day.
constexpr double kImmutableTimeoutS = 86400;

// What the command line gives as text, turned into MountOptions once parsed.
struct MountArgs {
  MountOptions options;
  std::string log_level = "info";
  std::string cache_size = "unlimited";
  std::string upload_memory_per_user = "256M";
  std::string upload_memory = "1G";
  std::string path_memory_per_user = "2G";
  std::string path_memory = "3G";
  std::string memory;  // --max-memory: the three above and the entries, from one number
  std::string cache_reserve = "5%";
  std::string lookahead = "auto";
  bool no_cache = false;
};

// A shared mount's jobs and users (prefetch/jobs.h, docs/semantics.md).
void add_job_options(CLI::App* cmd, prefetch::JobLimits& limits) {
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
  cmd->add_option("--max-entries", limits.entries,
                  "Order and manifest entries all users' jobs may hold; above the per-user limit")
      ->default_val(limits.entries)
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 33));
  cmd->add_option("--max-streams-per-user", limits.streams_per_user,
                  "Streams one user's jobs may hold together: below the mount's 1024, so one "
                  "user cannot take them all")
      ->default_val(limits.streams_per_user)
      ->check(CLI::Range(1, 1023));
  cmd->add_option("--max-publish-cpu-per-user", limits.publish_cpu_burst_s,
                  "Seconds of the daemon's CPU one user's publishing may take at once, then a "
                  "tenth of a core; past it, the user's next order is refused until it refills")
      ->default_val(limits.publish_cpu_burst_s)
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--job-idle-timeout", limits.idle_timeout_s,
                  "Seconds without a publish or an open of its files after which a job ends, "
                  "even if its processes still run")
      ->default_val(limits.idle_timeout_s)
      ->check(CLI::Range(1.0, 1e9));
}

// When the shared storage stops answering (prefetch/source_guard.h, docs/semantics.md).
void add_outage_options(CLI::App* cmd, prefetch::EngineOptions& engine) {
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
      ->transform(one_of({"serve", "fail"}))  // runs first: a transform goes ahead of the others
      ->option_text("serve|fail")
      ->default_str("serve");
}

// What one user's requests may make the daemon hold (prefetch/user_ledger.h).
void add_user_limit_options(CLI::App* cmd, MountArgs& args) {
  cmd->add_option("--max-memory", args.memory,
                  "Memory all users' orders may make the daemon hold (default 6G): a sixth for "
                  "uploads being written, half for their paths, a third for published entries; "
                  "each user a quarter of those (two thirds of the paths'). --max-* flags given "
                  "as well win");
  cmd->add_option("--max-upload-memory-per-user", args.upload_memory_per_user,
                  "Memory the orders one user is writing into .epochfs/ may hold (a size); the "
                  "write that passes it fails with EDQUOT")
      ->default_val(args.upload_memory_per_user);
  cmd->add_option("--max-upload-memory", args.upload_memory,
                  "Memory the orders all users are writing may hold; above the per-user limit")
      ->default_val(args.upload_memory);
  cmd->add_option("--max-path-memory-per-user", args.path_memory_per_user,
                  "Memory the paths one user's orders add to the daemon's path registry may take "
                  "(a size; kept until the unmount); past it, an order with new paths is refused")
      ->default_val(args.path_memory_per_user);
  cmd->add_option("--max-path-memory", args.path_memory,
                  "Memory the paths all users' orders add may take; above the per-user limit and "
                  "below the registry's 4G")
      ->default_val(args.path_memory);
  cmd->add_option("--max-opens-per-user", args.options.fs.opens_per_user,
                  "Files and directories one user may hold open through an --allow-other mount "
                  "(at most half the daemon's share for readers); past it, open fails with "
                  "EMFILE")
      ->default_val(args.options.fs.opens_per_user)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
}

// A per-user limit and the mount's, given as sizes under the flags --max-NAME-per-user and
// --max-NAME; false (with a message) if one is malformed or the per-user one is not below.
bool parse_limit_pair(const char* name, const std::string& per_user_text,
                      const std::string& all_text, uint64_t* per_user, uint64_t* all) {
  auto p = parse_size(per_user_text);
  auto a = parse_size(all_text);
  if (!p || !a || *p == 0) {
    fprintf(stderr, "epochfs: --max-%s-per-user %s, --max-%s %s: expected sizes such as 256M\n",
            name, per_user_text.c_str(), name, all_text.c_str());
    return false;
  }
  if (*p >= *a) {
    fprintf(stderr,
            "epochfs: --max-%s-per-user %s must be below --max-%s %s, so that no one user can "
            "reach the mount's limit\n",
            name, per_user_text.c_str(), name, all_text.c_str());
    return false;
  }
  *per_user = *p;
  *all = *a;
  return true;
}

// --max-memory: the memory limits and the entry limits the flags did not give, from one number.
bool apply_memory_budget(const CLI::App& cmd, MountArgs& args, prefetch::JobLimits& limits) {
  if (args.memory.empty()) {
    return true;
  }
  const auto budget = parse_size(args.memory);
  constexpr uint64_t kLeast = 24 << 20;  // a quarter of a sixth must still hold an order
  if (!budget || *budget < kLeast) {
    fprintf(stderr, "epochfs: --max-memory %s: expected a size of at least 24M, such as 4G\n",
            args.memory.c_str());
    return false;
  }
  const auto unset = [&cmd](const char* flag) { return cmd.count(flag) == 0; };
  const auto size = [](uint64_t bytes) { return std::to_string(bytes); };
  if (unset("--max-upload-memory") && unset("--max-upload-memory-per-user")) {
    args.upload_memory = size(*budget / 6);
    args.upload_memory_per_user = size(*budget / 24);
  }
  if (unset("--max-path-memory") && unset("--max-path-memory-per-user")) {
    const uint64_t paths = std::min<uint64_t>(*budget / 2, uint64_t{3} << 30);  // registry: 4G
    args.path_memory = size(paths);
    args.path_memory_per_user = size(paths / 3 * 2);
  }
  if (unset("--max-entries") && unset("--max-entries-per-user")) {
    limits.entries = std::max<uint64_t>(*budget / 3 / sizeof(uint64_t), 2);
    limits.entries_per_user = limits.entries / 4;
  }
  return true;
}

// Fills the per-user limits given as sizes; false (with a message) if one is malformed.
bool apply_limit_flags(const MountArgs& args, prefetch::JobLimits& limits) {
  if (!parse_limit_pair("upload-memory", args.upload_memory_per_user, args.upload_memory,
                        &limits.upload_bytes_per_user, &limits.upload_bytes) ||
      !parse_limit_pair("path-memory", args.path_memory_per_user, args.path_memory,
                        &limits.path_bytes_per_user, &limits.path_bytes)) {
    return false;
  }
  if (limits.entries_per_user >= limits.entries) {
    fprintf(stderr,
            "epochfs: --max-entries-per-user %llu must be below --max-entries %llu, so that no "
            "one user can reach the mount's limit\n",
            static_cast<unsigned long long>(limits.entries_per_user),
            static_cast<unsigned long long>(limits.entries));
    return false;
  }
  if (limits.path_bytes > (uint64_t{4} << 30)) {
    fprintf(stderr, "epochfs: --max-path-memory %s: the path registry holds at most 4G\n",
            args.path_memory.c_str());
    return false;
  }
  return true;
}

void add_cache_options(CLI::App* cmd, MountArgs& args) {
  MountOptions& o = args.options;
  o.cache.root = "/var/cache/epochfs";
  cmd->add_option("--cache-dir", o.cache.root,
                  "Local directory for cached copies (each mount uses its own subdirectory)")
      ->default_val(o.cache.root);
  cmd->add_option("--cache-size", args.cache_size,
                  "Bytes the cache may use on disk, e.g. 300G (default: what the free-space "
                  "reserve allows)");
  cmd->add_option("--cache-reserve", args.cache_reserve,
                  "Free space to leave on the cache filesystem, in percent")
      ->default_val(args.cache_reserve);
  cmd->add_flag("--no-cache", args.no_cache, "Read everything from the source");
  cmd->add_flag("--keep-cache", o.cache.keep,
                "Keep the cached copies at unmount for the next mount of the same source "
                "(each is verified before its first use)");
  cmd->add_option("--stage-threads", o.engine.stage_threads,
                  "The most copies into the cache at once (how many run is learned from the "
                  "source)")
      ->default_val(o.engine.stage_threads)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--lookahead", args.lookahead,
                  "How far ahead of the trainer to stage: a number of files, a size (e.g. 2G), "
                  "auto (the consumption rate times the copy latency, twice over), or 0 (no "
                  "prefetch: the published orders only decide what the cache keeps)")
      ->default_val(args.lookahead);
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
std::optional<prefetch::Lookahead> parse_lookahead(const std::string& text) {
  using prefetch::Lookahead;
  if (text == "auto") {
    return Lookahead{};
  }
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return Lookahead{Lookahead::Kind::kFiles, std::stoull(text)};
  }
  auto bytes = parse_size(text);
  if (!bytes || *bytes == 0) {
    return std::nullopt;
  }
  return Lookahead{Lookahead::Kind::kBytes, *bytes};
}

// Fills o.cache from the flags; false (with a message) if one is malformed.
bool apply_cache_flags(const MountArgs& args, MountOptions& o) {
  if (args.no_cache && (args.cache_size != "unlimited" || o.cache.keep)) {
    fprintf(stderr, "epochfs mount: --no-cache contradicts %s: drop one\n",
            o.cache.keep ? "--keep-cache" : ("--cache-size " + args.cache_size).c_str());
    return false;
  }
  if (args.no_cache) {
    o.cache.capacity_bytes = 0;
  } else if (args.cache_size != "unlimited") {
    auto size = parse_size(args.cache_size);
    if (!size) {
      fprintf(stderr, "epochfs: --cache-size %s: expected a size such as 300G\n",
              args.cache_size.c_str());
      return false;
    }
    o.cache.capacity_bytes = *size;
  }
  auto reserve = parse_percent(args.cache_reserve);
  if (!reserve) {
    fprintf(stderr, "epochfs: --cache-reserve %s: expected a percentage such as 5%%\n",
            args.cache_reserve.c_str());
    return false;
  }
  o.cache.reserve_fraction = *reserve;
  auto lookahead = parse_lookahead(args.lookahead);
  if (!lookahead) {
    fprintf(stderr, "epochfs: --lookahead %s: expected auto, a number of files or a size\n",
            args.lookahead.c_str());
    return false;
  }
  o.engine.lookahead = *lookahead;
  if (!o.metrics_file.empty()) {
    // The daemon changes directory when it detaches: keep the path absolute.
    o.metrics_file = absolute_path(o.metrics_file);
  }
  if (!o.engine.shuffle_file.empty()) {
    // The daemon changes directory when it detaches: keep the path absolute.
    o.engine.shuffle_file = absolute_path(o.engine.shuffle_file);
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

CLI::App* add_mount_options(CLI::App& app, MountArgs& args) {
  MountOptions& o = args.options;
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
  cmd->add_option("--read-ahead", o.read_ahead_kb,
                  "KiB the kernel reads ahead in a file (default 0: the kernel's, 128 KiB); "
                  "1024 for a memory-mapped dataset read whole each epoch; needs root")
      ->default_val(o.read_ahead_kb)
      ->check(CLI::Range(0, 65536));
  cmd->add_option("--fuse-transport", o.fuse_uring,
                  "device: requests by /dev/fuse; uring: by FUSE over io_uring where the kernel "
                  "offers it (Linux 6.14+ with the fuse module's enable_uring), else device")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, bool>{{"device", false}, {"uring", true}}, CLI::ignore_case))
      ->option_text("device|uring");
  cmd->add_option("--data-path", o.data_path,
                  "classic: every read comes to the daemon; passthrough: the kernel reads "
                  "cached copies itself where it can (Linux 6.9+, root), else classic; auto: "
                  "passthrough where it can, else classic; no-open: the kernel opens files "
                  "without asking and keeps their pages (hot files never reach the daemon)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, fusefs::DataPath>{{"auto", fusefs::DataPath::kAuto},
                                                  {"classic", fusefs::DataPath::kClassic},
                                                  {"passthrough", fusefs::DataPath::kPassthrough},
                                                  {"no-open", fusefs::DataPath::kNoOpen}},
          CLI::ignore_case))
      ->transform(one_of({"auto", "classic", "passthrough", "no-open"}))  // runs first
      ->option_text("auto|classic|passthrough|no-open");
  add_outage_options(cmd, o.engine);
  cmd->add_option("--metrics-file", o.metrics_file,
                  "Write Prometheus metrics to this file every 5 s (node_exporter textfile)");
  cmd->add_option("--metrics-listen", o.metrics_listen,
                  "Also serve the Prometheus metrics over HTTP at HOST:PORT/metrics "
                  "(e.g. 127.0.0.1:9101; port 0: any free one, said in the log)");
  cmd->add_option("-o", o.fuse_options, "Standard FUSE mount options (comma-separated)")
      ->allow_extra_args(false);
  cmd->add_option("--log-file", o.log_file,
                  "Log here instead of syslog (in the background) or stderr (in the foreground)");
  cmd->add_option("--log-level", args.log_level, "error, warning, info or debug")
      ->check(one_of({"error", "warning", "info", "debug"}));
  return cmd;
}

cachestore::LogLevel parse_level(const std::string& s) {
  using cachestore::LogLevel;
  if (s == "error") return LogLevel::kError;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "debug") return LogLevel::kDebug;
  return LogLevel::kInfo;
}

// The values the flags imply once parsed; false (with a message) if one is malformed or they
// contradict each other: a usage error.
bool finish(const CLI::App& cmd, MountArgs& args) {
  MountOptions& o = args.options;
  // --immutable lengthens the timeouts the user did not set explicitly.
  if (o.fs.immutable && cmd.count("--attr-timeout") == 0) {
    o.fs.attr_timeout_s = kImmutableTimeoutS;
  }
  if (o.fs.immutable && cmd.count("--negative-timeout") == 0) {
    o.fs.negative_timeout_s = kImmutableTimeoutS;
  }
  o.fs.entry_timeout_s = o.fs.attr_timeout_s;
  o.engine.immutable = o.fs.immutable;
  o.engine.attr_timeout_s = o.fs.attr_timeout_s;
  return apply_cache_flags(args, o) && apply_memory_budget(cmd, args, o.engine.limits) &&
         apply_limit_flags(args, o.engine.limits);
}

}  // namespace

Subcommand add_mount_command(CLI::App& app) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd = add_mount_options(app, *args);
  add_cache_options(cmd, *args);
  add_user_limit_options(cmd, *args);
  return {cmd, [cmd, args] {
            cachestore::set_log_level(parse_level(args->log_level));
            return finish(*cmd, *args) ? cmd_mount(args->options) : kUsageError;
          }};
}

}  // namespace epochfs::tools
