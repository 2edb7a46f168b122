// `epochfs-lab bench-tree`: an ImageNet-sized tree (1,281,167 small files by default) through
// a real mount. Reports what grows with the number of files: the mount's start, publishing a
// full order (two epochs) and its first staged copy, the daemon's memory after each step, the
// open rate through the mount against the same reads of the source, and the unmount, which
// deletes a copy of every file.
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/commands.h"
#include "tools/lab/dataset.h"
#include "tools/lab/process.h"
#include "tools/lab/read_bench.h"
#include "tools/lab/trainer.h"

#include <nlohmann/json.hpp>

namespace epochfs::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kMountTimeout = std::chrono::seconds(120);
constexpr auto kDaemonExitWait = std::chrono::seconds(900);

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The daemon's resident memory in bytes (VmRSS), or 0 if it cannot be read.
double rss_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(4096, '\n');
  }
  return 0;
}

double stat_number(const std::optional<StatsDoc>& doc, const std::string& key) {
  return doc ? doc->number(key).value_or(0) : 0;
}

// Staging is done when no planning pass is due and no copy is queued, in two documents in a
// row with the same count of staged files (a copy ending between the reads).
void wait_for_staging(const std::string& mnt) {
  double last_staged = -1;
  for (;;) {
    auto doc = read_stats(mnt);
    const bool idle = doc && doc->values["prefetch.planning"] == "false" &&
                      stat_number(doc, "cache.copies_queued") == 0;
    const double staged = stat_number(doc, "cache.files_staged");
    if (!doc || (idle && staged == last_staged)) {
      return;
    }
    last_staged = idle ? staged : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Seconds from `start` until a copy beyond the `before` already made is staged; -1 if none
// within 60 s or if asked to stop first.
double wait_first_staged(const std::string& mnt, double before, Clock::time_point start,
                         std::stop_token stop) {
  while (seconds_since(start) < 60 && !stop.stop_requested()) {
    if (stat_number(read_stats(mnt), "cache.files_staged") > before) {
      return seconds_since(start);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

// Whether dir holds a directory given up for removal (".trash.<name>").
bool has_trash(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().rfind(".trash.", 0) == 0) {
      return true;
    }
  }
  return false;
}

// Files and directories left under dir (recursively).
size_t entries_under(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// 64 small files beside the dataset, in no order, for the LatencyProbe; their paths.
std::vector<std::string> probe_files(const std::string& src) {
  std::filesystem::create_directories(src + "/probe");
  std::vector<std::string> paths;
  for (int i = 0; i < 64; ++i) {
    paths.push_back("probe/p" + std::to_string(i));
    std::ofstream(src + "/" + paths.back()) << std::string(2048, 'p');
  }
  return paths;
}

std::vector<std::string> in_order(const std::vector<std::string>& paths,
                                  const std::vector<uint32_t>& order) {
  std::vector<std::string> out;
  out.reserve(order.size());
  for (uint32_t i : order) {
    out.push_back(paths[i]);
  }
  return out;
}

// Reads a few files through the mount over and over on a thread of its own, keeping the longest
// read (open to close): what a reader waits while something else holds the daemon up.
class LatencyProbe {
 public:
  LatencyProbe(const std::string& mnt, const std::vector<std::string>& paths)
      : thread_([this, mnt, paths] { run(mnt, paths); }) {}

  ~LatencyProbe() { stop(); }

  // Stops the thread; the longest read in seconds and the number of reads.
  std::pair<double, uint64_t> stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
    return {longest_s_, reads_};
  }

 private:
  void run(const std::string& mnt, const std::vector<std::string>& paths) {
    std::vector<char> buf;
    for (size_t i = 0; !stop_; i = (i + 1) % paths.size()) {
      const auto start = Clock::now();
      read_whole(mnt + "/" + paths[i], buf);
      longest_s_ = std::max(longest_s_, seconds_since(start));
      ++reads_;
    }
  }

  std::atomic<bool> stop_{false};
  double longest_s_ = 0;  // the thread's until stop() joins it
  uint64_t reads_ = 0;
  std::thread thread_;
};

class Report {
 public:
  void step(const std::string& name, double value, const char* unit) {
    printf("  %-44s %14.3f %s\n", name.c_str(), value, unit);
    fflush(stdout);
    doc_[name] = value;
  }

  void memory(const std::string& when, pid_t pid) {
    step("rss_mib_" + when, rss_bytes(pid) / (1 << 20), "MiB");
  }

  void pass(const std::string& name, const ReadFigures& f) {
    step(name + "_files_per_s", f.files_per_s(), "files/s");
    step(name + "_errors", static_cast<double>(f.errors), "");
  }

  double at(const std::string& name) const { return doc_.value(name, 0.0); }

  const nlohmann::json& doc() const { return doc_; }

 private:
  nlohmann::json doc_;
};

// The epochs through the mount: epoch 0 with both orders published, the page cache dropped
// before each pass (every lookup and open reaches the daemon), epoch 1 once staging is done.
bool read_epochs(const BenchTreeOptions& o, const std::string& src, const std::string& mnt,
                 pid_t pid, const std::vector<std::string>& paths, Report& r) {
  const std::vector<std::vector<uint32_t>> orders = {epoch_order(paths.size(), o.seed, 0),
                                                     epoch_order(paths.size(), o.seed, 1)};
  // The probe's files are in no order (an open of an ordered file would move its stream on),
  // read once before, so that its reads are hits.
  const std::vector<std::string> probed = probe_files(src);
  read_files(mnt, probed, 1);
  {
    LatencyProbe before(mnt, probed);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto [longest, reads] = before.stop();
    r.step("probe_longest_read_ms_before", longest * 1e3, "ms");
  }
  LatencyProbe probe(mnt, probed);
  // The probe's files were copied when first read: the first copy of an order comes after.
  wait_for_staging(mnt);
  const double staged_before = stat_number(read_stats(mnt), "cache.files_staged");
  const auto start = Clock::now();
  // Watched from its own thread: the first copy may land while the second order uploads.
  double first_staged = -1;
  std::jthread watcher([&](std::stop_token stop) {
    first_staged = wait_first_staged(mnt, staged_before, start, stop);
  });
  for (size_t e = 0; e < orders.size(); ++e) {
    const auto t = Clock::now();
    if (!publish_order(mnt, paths, orders[e], e)) {
      return false;
    }
    r.step("publish_s_epoch_" + std::to_string(e), seconds_since(t), "s");
  }
  watcher.join();
  r.step("first_staged_s", first_staged, "s");
  const auto [longest, reads] = probe.stop();
  r.step("probe_longest_read_ms_publishing", longest * 1e3, "ms");
  r.step("probe_reads_publishing", static_cast<double>(reads), "");
  auto doc = read_stats(mnt);
  r.step("schedule_entries", stat_number(doc, "prefetch.schedule_entries"), "");
  r.step("schedule_bytes", stat_number(doc, "prefetch.schedule_bytes"), "B");
  r.step("files_known", stat_number(doc, "files_known"), "");
  r.memory("published", pid);

  for (size_t e = 0; e < orders.size(); ++e) {
    if (e > 0) {
      wait_for_staging(mnt);
    }
    drop_page_cache();
    const double hits_before = stat_number(read_stats(mnt), "hits");
    const auto f = read_files(mnt, in_order(paths, orders[e]), o.threads);
    const std::string name = "epoch_" + std::to_string(e);
    r.pass(name, f);
    r.step(name + "_hits", stat_number(read_stats(mnt), "hits") - hits_before, "");
    r.memory("after_" + name, pid);
  }
  doc = read_stats(mnt);
  r.step("files_cached", stat_number(doc, "cache.files_cached"), "");
  r.step("inodes", stat_number(doc, "inodes"), "");
  return true;
}

// `epochfs unmount`, timed: until the mountpoint is free, until the command returns, until
// the daemon has exited; then what is left in the cache directory.
bool unmount_timed(const std::string& mnt, const std::string& cache, pid_t pid, Report& r) {
  const auto start = Clock::now();
  const pid_t cmd = spawn({sibling_binary("epochfs"), "unmount", mnt});
  bool freed = false;
  while (!freed && seconds_since(start) < 120) {
    freed = !mount_type_at(mnt);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.step("unmount_mountpoint_free_s", freed ? seconds_since(start) : -1, "s");
  bool given_up = false;
  while (!given_up && seconds_since(start) < 120 && ::kill(pid, 0) == 0) {
    given_up = has_trash(cache);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.step("unmount_cache_given_up_s", given_up ? seconds_since(start) : -1, "s");
  const auto cmd_code = wait_exit(cmd, kDaemonExitWait);
  r.step("unmount_command_s", seconds_since(start), "s");
  const auto code = wait_exit(pid, kDaemonExitWait);
  r.step("unmount_daemon_exit_s", code ? seconds_since(start) : -1, "s");
  r.step("cache_entries_left", static_cast<double>(entries_under(cache)), "");
  return freed && cmd_code == 0 && code == 0;
}

int run_bench_tree(const BenchTreeOptions& o, const std::string& dir) {
  const std::string src = dir + "/source", mnt = dir + "/mnt", cache = dir + "/cache";
  DatasetSpec spec;
  spec.num_files = o.files;
  spec.num_classes = o.classes;
  spec.mean_file_bytes = o.mean_kb * 1024;
  spec.seed = o.seed;
  printf("epochfs-lab bench-tree: %zu files in %zu directories, mean %.1f KB, %u readers\n",
         o.files, o.classes, o.mean_kb, o.threads);
  fflush(stdout);
  Report r;
  auto t = Clock::now();
  auto paths = make_dataset(src, spec);
  if (!paths.is_ok()) {
    fprintf(stderr, "epochfs-lab bench-tree: %s\n", paths.status().to_string().c_str());
    return 1;
  }
  r.step("dataset_ready_s", seconds_since(t), "s");
  if (!drop_page_cache()) {
    fprintf(stderr, "epochfs-lab bench-tree: cannot drop the page cache (needs root)\n");
    return 1;
  }
  r.pass("direct_epoch_0",
         read_files(src, in_order(paths.value(), epoch_order(o.files, o.seed, 0)), o.threads));

  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
  std::filesystem::create_directories(mnt);
  std::filesystem::create_directories(cache);
  drop_page_cache();
  t = Clock::now();
  const pid_t pid = spawn({sibling_binary("epochfs"), "mount", "--foreground", "--log-level",
                           "warning", "--cache-dir", cache, src, mnt});
  if (pid < 0 || !wait_for_mount(mnt, "fuse.epochfs", pid, kMountTimeout)) {
    fprintf(stderr, "epochfs-lab bench-tree: the mount did not come up\n");
    stop_mount(mnt, pid, kMountTimeout);
    return 1;
  }
  r.step("mount_s", seconds_since(t), "s");
  r.memory("mounted", pid);
  const bool read_ok = read_epochs(o, src, mnt, pid, paths.value(), r);
  const bool unmount_ok = read_ok && unmount_timed(mnt, cache, pid, r);
  if (!read_ok || !unmount_ok) {
    stop_mount(mnt, pid, kMountTimeout);
  }
  const double per_file = (r.at("rss_mib_after_epoch_1") - r.at("rss_mib_mounted")) * (1 << 20) /
                          static_cast<double>(o.files);
  r.step("rss_bytes_per_file_after_epochs", per_file, "B");
  if (!o.json.empty()) {
    std::ofstream(o.json) << r.doc().dump(2) << "\n";
  }
  const bool clean = r.at("direct_epoch_0_errors") + r.at("epoch_0_errors") +
                         r.at("epoch_1_errors") + r.at("cache_entries_left") ==
                     0;
  return read_ok && unmount_ok && clean ? 0 : 1;
}

}  // namespace

int cmd_bench_tree(const BenchTreeOptions& o) {
  const std::string dir = make_work_dir(o.dir, "epochfs-tree");
  if (dir.empty()) {
    fprintf(stderr, "epochfs-lab bench-tree: cannot create a work directory\n");
    return 1;
  }
  return run_bench_tree(o, dir);
}

}  // namespace epochfs::tools
