// `epochfs bench`: a trainer over emulated shared storage, every strategy side by side in one
// run (the machines are shared and noisy: only ratios measured together count).
//
// The shared storage is epochfs-slowfs over a generated ImageNet-like dataset: a latency per
// open and read, one shared link, a cap on requests served at once. Scenarios, each E epochs
// of the same trainer (tools/trainer.h) with a fresh shuffle per epoch:
//   ideal    the dataset on local disk, read natively (no staging time counted)
//   direct   the trainer reads the shared storage
//   lru      epochfs over the shared storage, no order published: a read-through LRU cache,
//            what cachefilesd gives
//   copy     copy the whole dataset to local disk first (timed), then train from it
//   epochfs  epochfs with each epoch's order published before it starts (and the next one)
// The page cache is dropped before every epoch, so every epoch reads from its filesystem.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"
#include "tools/commands.h"
#include "tools/dataset.h"
#include "tools/process.h"
#include "tools/read_bench.h"
#include "tools/stats_doc.h"
#include "tools/trainer.h"

namespace epochfs::tools {
namespace {

namespace fs = std::filesystem;

constexpr auto kMountTimeout = std::chrono::seconds(30);

struct Row {
  std::string scenario;
  size_t epoch = 0;
  EpochFigures figures;
  std::optional<double> hit_rate;
  double source_mb = 0;
  double staging_s = 0;  // copy: the time the copy took before training (in epoch 1's time)
  double ratio_to_ideal = 0;
};

std::string sibling_binary(const std::string& name) {
  return fs::path(self_exe()).parent_path() / name;
}

// Publishes one epoch's order into the mount's control directory; false (with a message) if
// the daemon refused it.
bool publish_order(const std::string& mnt, const std::vector<std::string>& paths,
                   const std::vector<uint32_t>& order, size_t epoch) {
  std::string text =
      "#epoch " + std::to_string(epoch) + "\n#count " + std::to_string(order.size()) + "\n";
  for (uint32_t i : order) {
    text += paths[i] + "\n";
  }
  const std::string path = mnt + "/.epochfs/order-" + std::to_string(epoch);
  cachestore::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  const bool ok = fd.valid() && cachestore::write_all(fd.get(), text, path).is_ok() &&
                  ::close(fd.release()) == 0;
  if (!ok) {
    fprintf(stderr, "epochfs bench: publishing epoch %zu: %s\n", epoch, strerror(errno));
  }
  return ok;
}

// Copies root/paths to dest with `threads` threads (a parallel rsync); seconds taken.
double copy_dataset(const std::string& root, const std::string& dest,
                    const std::vector<std::string>& paths, unsigned threads) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < paths.size(); i = next++) {
        const fs::path to = fs::path(dest) / paths[i];
        std::error_code ec;
        fs::create_directories(to.parent_path(), ec);
        fs::copy_file(fs::path(root) / paths[i], to, fs::copy_options::overwrite_existing, ec);
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class Bench {
 public:
  Bench(const BenchOptions& o, std::string dir, std::vector<std::string> paths,
        uint64_t dataset_bytes)
      : o_(o), dir_(std::move(dir)), paths_(std::move(paths)), dataset_bytes_(dataset_bytes) {}

  void run(const std::string& scenario) {
    if (scenario == "ideal") {
      train(scenario, dir_ + "/data", nullptr, 0);
    } else if (scenario == "direct") {
      train(scenario, shared(), nullptr, 0);
    } else if (scenario == "copy") {
      const std::string dest = dir_ + "/copy";
      fs::remove_all(dest);
      drop_page_cache();
      const double seconds = copy_dataset(shared(), dest, paths_, o_.stage_threads);
      train(scenario, dest, nullptr, seconds);
      fs::remove_all(dest);
    } else {
      mount_and_train(scenario);
    }
  }

  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::string shared() const { return dir_ + "/shared"; }

  void mount_and_train(const std::string& scenario) {
    const std::string mnt = dir_ + "/mnt";
    const auto capacity =
        static_cast<uint64_t>(o_.cache_fraction * static_cast<double>(dataset_bytes_));
    std::vector<std::string> argv = {self_exe(),
                                     "mount",
                                     "--foreground",
                                     shared(),
                                     mnt,
                                     "--cache-dir",
                                     dir_ + "/cache",
                                     "--stage-threads",
                                     std::to_string(o_.stage_threads),
                                     "--log-level",
                                     "warning"};
    if (o_.cache_fraction < 1) {
      argv.insert(argv.end(), {"--cache-size", std::to_string(capacity)});
    }
    if (scenario == "lru") {
      argv.insert(argv.end(), {"--lookahead", "0"});
    }
    MountedDaemon daemon(argv, mnt, "fuse.epochfs", kMountTimeout);
    if (!daemon.up()) {
      fprintf(stderr, "epochfs bench: the %s mount did not come up\n", scenario.c_str());
      return;
    }
    train(scenario, mnt, &mnt, 0);
  }

  // Trains o_.epochs epochs reading from root; with mnt, reads its stats (and, for the epochfs
  // scenario, publishes each epoch's order first).
  void train(const std::string& scenario, const std::string& root, const std::string* mnt,
             double staging_s) {
    const bool publish = scenario == "epochfs";
    double hits = 0, misses = 0, source = 0;
    for (size_t e = 0; e < o_.epochs; ++e) {
      const auto order = epoch_order(paths_.size(), o_.seed, e);
      if (publish) {
        if (e == 0) {
          publish_order(*mnt, paths_, order, 0);
        }
        if (e + 1 < o_.epochs) {  // the next epoch early, as a sampler wrapper does
          publish_order(*mnt, paths_, epoch_order(paths_.size(), o_.seed, e + 1), e + 1);
        }
      }
      drop_page_cache();
      Row row;
      row.scenario = scenario;
      row.epoch = e + 1;
      row.figures = run_epoch(root, paths_, order, o_.trainer);
      if (e == 0 && staging_s > 0) {
        // Copy-first: the trainer waited for the whole copy before its first batch.
        row.staging_s = staging_s;
        row.figures.seconds += staging_s;
        row.figures.stall_s += staging_s;
        row.source_mb = static_cast<double>(dataset_bytes_) / 1e6;
      }
      if (mnt != nullptr) {
        if (auto doc = read_stats(*mnt)) {
          const double h = doc->number("hits").value_or(0);
          const double m = doc->number("misses").value_or(0);
          const double s = doc->number("bytes_from_source").value_or(0) +
                           doc->number("cache.bytes_staged").value_or(0);
          row.hit_rate = (h - hits) / std::max(1.0, h - hits + m - misses);
          row.source_mb = (s - source) / 1e6;
          hits = h;
          misses = m;
          source = s;
        }
      } else if (root == shared()) {
        row.source_mb = static_cast<double>(row.figures.bytes) / 1e6;
      }
      if (row.scenario == "ideal") {
        ideal_[row.epoch] = row.figures.samples_per_s();
      }
      const double ideal = ideal_.count(row.epoch) ? ideal_[row.epoch] : 0;
      row.ratio_to_ideal = ideal > 0 ? row.figures.samples_per_s() / ideal : 0;
      rows_.push_back(row);
      print(row);
    }
  }

  void print(const Row& r) {
    char hit[16] = "-";
    if (r.hit_rate) {
      snprintf(hit, sizeof(hit), "%.3f", *r.hit_rate);
    }
    printf("%-8s %5zu %10.0f %7.1f%% %9.1f %9.1f %8.2f %8s %10.0f %9.1f\n", r.scenario.c_str(),
           r.epoch, r.figures.samples_per_s(), 100 * r.figures.stall_fraction(),
           r.figures.p50_wait_ms, r.figures.p99_wait_ms, r.ratio_to_ideal, hit, r.source_mb,
           r.staging_s);
    if (r.figures.errors > 0) {
      printf("         %zu files could not be read\n", static_cast<size_t>(r.figures.errors));
    }
    fflush(stdout);
  }

  const BenchOptions& o_;
  const std::string dir_;
  const std::vector<std::string> paths_;
  const uint64_t dataset_bytes_;
  std::vector<Row> rows_;
  std::map<size_t, double> ideal_;
};

// Serves the dataset as shared storage for the time of the scenarios (unmounted before the
// work directory is removed).
std::vector<Row> run_scenarios(const BenchOptions& o, const std::string& dir,
                               std::vector<std::string> paths, uint64_t bytes) {
  MountedDaemon storage(
      {sibling_binary("epochfs-slowfs"), dir + "/data", dir + "/shared", "--latency-ms",
       std::to_string(o.latency_ms), "--bandwidth-mbs", std::to_string(o.bandwidth_mbs),
       "--max-inflight", std::to_string(o.max_inflight)},
      dir + "/shared", "fuse.slowfs", kMountTimeout);
  if (!storage.up()) {
    fprintf(stderr, "epochfs bench: the emulated shared storage did not come up\n");
    return {};
  }
  printf("dataset: %zu files, %.0f MB; shared storage: %.1f ms per request, %s, %u in flight\n",
         o.files, static_cast<double>(bytes) / 1e6, o.latency_ms,
         o.bandwidth_mbs > 0 ? (std::to_string(static_cast<int>(o.bandwidth_mbs)) + " MB/s").c_str()
                             : "no bandwidth cap",
         o.max_inflight);
  printf(
      "trainer: batches of %zu, %u loader threads, %.1f ms compute per batch "
      "(at most %.0f samples/s); cache %.0f%% of the dataset\n",
      o.trainer.batch, o.trainer.workers, o.trainer.compute_ms,
      static_cast<double>(o.trainer.batch) * 1000 / o.trainer.compute_ms, 100 * o.cache_fraction);
  printf("%-8s %5s %10s %8s %9s %9s %8s %8s %10s %9s\n", "scenario", "epoch", "samples/s", "stall",
         "p50 ms", "p99 ms", "/ideal", "hits", "source MB", "staging s");
  Bench bench(o, dir, std::move(paths), bytes);
  for (const auto& s : o.scenarios) {
    bench.run(s);
  }
  return bench.rows();
}

// The results as JSON: {"config": {...}, "results": {scenario: {epoch: {...}}}}.
bool write_json(const std::string& path, const BenchOptions& o, uint64_t dataset_bytes,
                const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "{\n  \"config\": {\"files\": " << o.files << ", \"dataset_bytes\": " << dataset_bytes
      << ", \"epochs\": " << o.epochs << ", \"batch\": " << o.trainer.batch
      << ", \"workers\": " << o.trainer.workers << ", \"compute_ms\": " << o.trainer.compute_ms
      << ", \"latency_ms\": " << o.latency_ms << ", \"bandwidth_mbs\": " << o.bandwidth_mbs
      << ", \"max_inflight\": " << o.max_inflight << ", \"cache_fraction\": " << o.cache_fraction
      << ", \"stage_threads\": " << o.stage_threads << "},\n  \"results\": {";
  std::string scenario;
  for (const Row& r : rows) {
    if (r.scenario != scenario) {
      out << (scenario.empty() ? "" : "},") << "\n    \"" << r.scenario << "\": {";
      scenario = r.scenario;
    } else {
      out << ",";
    }
    const EpochFigures& f = r.figures;
    out << "\n      \"" << r.epoch << "\": {\"samples_per_s\": " << f.samples_per_s()
        << ", \"seconds\": " << f.seconds << ", \"stall_fraction\": " << f.stall_fraction()
        << ", \"p50_wait_ms\": " << f.p50_wait_ms << ", \"p99_wait_ms\": " << f.p99_wait_ms
        << ", \"ratio_to_ideal\": " << r.ratio_to_ideal << ", \"hit_rate\": ";
    if (r.hit_rate) {
      out << *r.hit_rate;
    } else {
      out << "null";
    }
    out << ", \"source_bytes\": " << static_cast<uint64_t>(r.source_mb * 1e6)
        << ", \"staging_s\": " << r.staging_s << ", \"samples\": " << f.samples
        << ", \"bytes_read\": " << f.bytes << ", \"errors\": " << f.errors << "}";
  }
  out << (scenario.empty() ? "" : "}") << "\n  }\n}\n";
  return static_cast<bool>(out);
}

}  // namespace

int cmd_bench(const BenchOptions& o) {
  const std::string dir = make_work_dir(o.dir, "epochfs-bench");
  if (dir.empty()) {
    fprintf(stderr, "epochfs bench: cannot make a work directory\n");
    return 1;
  }
  DatasetSpec spec;
  spec.num_files = o.files;
  spec.num_classes = std::max<size_t>(1, o.files / 1000);
  spec.mean_file_bytes = o.mean_kb * 1024;
  spec.seed = o.seed;
  auto paths = make_dataset(dir + "/data", spec);
  if (!paths.is_ok()) {
    fprintf(stderr, "epochfs bench: %s\n", paths.status().to_string().c_str());
    return 1;
  }
  uint64_t bytes = 0;
  for (const auto& p : paths.value()) {
    bytes += (fs::file_size(dir + "/data/" + p) + 4095) / 4096 * 4096;
  }
  const auto rows = run_scenarios(o, dir, std::move(paths).value(), bytes);
  const bool complete = rows.size() == o.epochs * o.scenarios.size();
  if (!o.json.empty() && !write_json(o.json, o, bytes, rows)) {
    fprintf(stderr, "epochfs bench: cannot write %s\n", o.json.c_str());
    return 1;
  }
  if (o.dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return complete ? 0 : 1;
}

}  // namespace epochfs::tools
