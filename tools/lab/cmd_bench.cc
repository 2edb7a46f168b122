// `epochfs-lab bench`: a trainer over shared storage, every strategy side by side in one run (the
// machines are shared and noisy: only ratios measured together count).
//
// The shared storage is epochfs-slowfs over a generated ImageNet-like dataset (a latency per
// open and read, one shared link, a cap on requests served at once, from a preset), or a real
// GlusterFS over a rate-limited veth pair (test/fixtures/gluster/). Scenarios, each E epochs of the
// same trainer (tools/trainer.h) with a fresh shuffle per epoch:
//   ideal    the dataset on local disk, read natively (no staging time counted)
//   direct   the trainer reads the shared storage
//   lru      epochfs over the shared storage, no order published: a read-through LRU cache,
//            what cachefilesd gives
//   copy     copy the whole dataset to local disk first (timed), then train from it
//   epochfs  epochfs with each epoch's order published before it starts (and the next one)
// lru and epochfs run once per cache size. The scenarios take turns epoch by epoch, so drift
// of the machine hits all alike; a mount whose turn it is not is paused (SIGSTOP), so its
// staging neither competes with the others for the storage nor gains from their time. The
// page cache is dropped before every epoch, so every epoch reads from its filesystem.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"
#include "test/fixtures/slowfs/presets.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/commands.h"
#include "tools/lab/dataset.h"
#include "tools/lab/process.h"
#include "tools/lab/read_bench.h"
#include "tools/lab/trainer.h"

namespace epochfs::tools {
namespace {

namespace fs = std::filesystem;

constexpr auto kMountTimeout = std::chrono::seconds(30);
constexpr auto kGlusterTimeout = std::chrono::seconds(180);

// The storage settings after the preset and the overrides.
struct StorageSettings {
  double latency_ms = 0;
  double meta_latency_ms = 0;
  double bandwidth_mbs = 0;
  unsigned max_inflight = 0;
};

StorageSettings resolve_storage(const BenchOptions& o) {
  const auto* preset = slowfs::find_storage_preset(o.storage);
  StorageSettings s;
  if (preset != nullptr) {
    s = {preset->latency_ms, preset->meta_latency_ms, preset->bandwidth_mbs, preset->max_inflight};
  }
  s.latency_ms = o.latency_ms >= 0 ? o.latency_ms : s.latency_ms;
  s.meta_latency_ms = o.meta_latency_ms >= 0 ? o.meta_latency_ms : s.meta_latency_ms;
  s.bandwidth_mbs = o.bandwidth_mbs >= 0 ? o.bandwidth_mbs : s.bandwidth_mbs;
  s.max_inflight = o.max_inflight > 0 ? static_cast<unsigned>(o.max_inflight) : s.max_inflight;
  return s;
}

// Runs argv to its end; true if it exited 0.
bool run_to_end(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  const pid_t pid = spawn(argv);
  return pid > 0 && wait_exit(pid, timeout) == 0;
}

// The dataset at dir/data served as shared storage at dir/shared, for as long as this lives.
class SharedStorage {
 public:
  SharedStorage(const BenchOptions& o, const StorageSettings& s, const std::string& dir)
      : data_(dir + "/data"), path_(dir + "/shared"), gluster_(o.source == "gluster") {
    if (gluster_) {
      fs::create_directories(path_);
      const auto mbit = static_cast<unsigned>(s.bandwidth_mbs * 8);
      up_ =
          run_to_end({sibling_binary("epochfs-gluster"), "up", data_, path_, std::to_string(mbit)},
                     kGlusterTimeout);
      return;
    }
    emulated_ = std::make_unique<MountedDaemon>(
        std::vector<std::string>{sibling_binary("epochfs-slowfs"), data_, path_, "--latency-ms",
                                 std::to_string(s.latency_ms), "--meta-latency-ms",
                                 std::to_string(s.meta_latency_ms), "--bandwidth-mbs",
                                 std::to_string(s.bandwidth_mbs), "--max-inflight",
                                 std::to_string(s.max_inflight)},
        path_, "fuse.slowfs", kMountTimeout);
    up_ = emulated_->up();
  }

  ~SharedStorage() {
    if (gluster_) {
      run_to_end({sibling_binary("epochfs-gluster"), "down", data_, path_}, kGlusterTimeout);
    }
  }

  SharedStorage(const SharedStorage&) = delete;
  SharedStorage& operator=(const SharedStorage&) = delete;

  bool up() const { return up_; }

  const std::string& path() const { return path_; }

  // CPU seconds the emulation has used so far, and the files it opened (emulated only).
  std::optional<std::pair<double, double>> cpu_and_opens() const {
    if (!emulated_) {
      return std::nullopt;
    }
    const auto cpu = cpu_seconds(emulated_->pid());
    if (!cpu) {
      return std::nullopt;
    }
    char buf[32] = {};
    const ssize_t n = getxattr(path_.c_str(), "user.slowfs.opens", buf, sizeof(buf) - 1);
    const double opens = n > 0 ? std::atof(buf) : 0;
    return std::make_pair(*cpu, opens);
  }

 private:
  const std::string data_;
  const std::string path_;
  const bool gluster_;
  std::unique_ptr<MountedDaemon> emulated_;
  bool up_ = false;
};

// What the storage gives one reader and many: its per-file latency and its throughput.
struct StorageProbe {
  double per_file_ms = 0;  // one reader, files one after the other
  double files_per_s = 0;  // 64 readers
  double mb_per_s = 0;
};

StorageProbe probe_storage(const std::string& shared, const std::vector<std::string>& paths) {
  const size_t one = std::min<size_t>(100, paths.size() / 4 + 1);
  const std::vector<std::string> first(paths.begin(), paths.begin() + static_cast<long>(one));
  const std::vector<std::string> rest(
      paths.begin() + static_cast<long>(one),
      paths.begin() + static_cast<long>(std::min(paths.size(), one + 4000)));
  StorageProbe p;
  drop_page_cache();
  const ReadFigures serial = read_files(shared, first, 1);
  p.per_file_ms = serial.seconds * 1000 / static_cast<double>(std::max<uint64_t>(1, serial.files));
  drop_page_cache();
  const ReadFigures parallel = read_files(shared, rest, 64);
  p.files_per_s = parallel.files_per_s();
  p.mb_per_s = parallel.mb_per_s();
  return p;
}

struct Row {
  std::string run;  // scenario, with the cache size where it has one ("lru-50%")
  std::string scenario;
  double cache_fraction = 0;  // 0: no cache
  size_t epoch = 0;
  EpochFigures figures;
  std::optional<double> hit_rate;
  double source_mb = 0;
  double staging_s = 0;  // copy: the time the copy took before training (in epoch 1's time)
  double ratio_to_ideal = 0;
};

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

std::string run_name(const std::string& scenario, double cache_fraction) {
  if (cache_fraction >= 1 || cache_fraction <= 0) {
    return scenario;
  }
  return scenario + "-" + std::to_string(static_cast<int>(cache_fraction * 100 + 0.5)) + "%";
}

// One scenario at one cache size, trained an epoch per turn.
struct Run {
  std::string name;
  std::string scenario;
  double cache_fraction = 0;
  std::string root;  // where the trainer reads
  std::unique_ptr<MountedDaemon> daemon;
  double hits = 0, misses = 0, source_bytes = 0;  // the mount's counters after the last turn
};

class Bench {
 public:
  Bench(const BenchOptions& o, std::string dir, std::string shared, std::vector<std::string> paths,
        uint64_t dataset_bytes)
      : o_(o),
        dir_(std::move(dir)),
        shared_(std::move(shared)),
        paths_(std::move(paths)),
        dataset_bytes_(dataset_bytes) {}

  // Sets up every run (mounts, paused); false if a mount did not come up.
  bool prepare() {
    std::vector<std::string> scenarios = o_.scenarios;
    // ideal first: the others' ratios need its figure for the same epoch.
    std::stable_partition(scenarios.begin(), scenarios.end(),
                          [](const std::string& s) { return s == "ideal"; });
    for (const auto& s : scenarios) {
      const bool cached = s == "lru" || s == "epochfs";
      for (double f : cached ? o_.cache_fractions : std::vector<double>{0}) {
        auto run = std::make_unique<Run>();
        run->name = run_name(s, f);
        run->scenario = s;
        run->cache_fraction = f;
        run->root = s == "ideal"    ? dir_ + "/data"
                    : s == "direct" ? shared_
                                    : dir_ + "/" + run->name;
        if (cached && !mount(*run)) {
          return false;
        }
        runs_.push_back(std::move(run));
      }
    }
    return true;
  }

  void run_all() {
    for (size_t e = 0; e < o_.epochs; ++e) {
      for (auto& run : runs_) {
        turn(*run, e);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_ + "/copy", ec);
  }

  const std::vector<Row>& rows() const { return rows_; }

 private:
  bool mount(Run& run) {
    const std::string mnt = dir_ + "/" + run.name;
    std::vector<std::string> argv = {sibling_binary("epochfs"),
                                     "mount",
                                     "--foreground",
                                     shared_,
                                     mnt,
                                     "--cache-dir",
                                     dir_ + "/cache-" + run.name,
                                     "--stage-threads",
                                     std::to_string(o_.stage_threads),
                                     "--log-level",
                                     "warning"};
    if (run.cache_fraction < 1) {
      const auto capacity =
          static_cast<uint64_t>(run.cache_fraction * static_cast<double>(dataset_bytes_));
      argv.insert(argv.end(), {"--cache-size", std::to_string(capacity)});
    }
    if (run.scenario == "lru") {
      argv.insert(argv.end(), {"--lookahead", "0"});
    }
    run.daemon = std::make_unique<MountedDaemon>(argv, mnt, "fuse.epochfs", kMountTimeout);
    if (!run.daemon->up()) {
      fprintf(stderr, "epochfs-lab bench: the %s mount did not come up\n", run.name.c_str());
      return false;
    }
    run.daemon->pause();
    return true;
  }

  // Epoch e of one run: its mount continued for the turn and paused after it.
  void turn(Run& run, size_t e) {
    if (run.daemon) {
      run.daemon->resume();
    }
    const auto order = epoch_order(paths_.size(), o_.seed, e);
    if (run.scenario == "epochfs") {
      if (e == 0) {
        publish_order(run.root, paths_, order, 0);
      }
      if (e + 1 < o_.epochs) {  // the next epoch early, as a sampler wrapper does
        publish_order(run.root, paths_, epoch_order(paths_.size(), o_.seed, e + 1), e + 1);
      }
    }
    double staging_s = 0;
    if (run.scenario == "copy" && e == 0) {
      fs::remove_all(run.root);
      drop_page_cache();
      staging_s = copy_dataset(shared_, run.root, paths_, o_.stage_threads);
    }
    drop_page_cache();
    Row row;
    row.run = run.name;
    row.scenario = run.scenario;
    row.cache_fraction = run.cache_fraction;
    row.epoch = e + 1;
    row.figures = run_epoch(run.root, paths_, order, o_.trainer);
    if (staging_s > 0) {
      // Copy-first: the trainer waited for the whole copy before its first batch.
      row.staging_s = staging_s;
      row.figures.seconds += staging_s;
      row.figures.stall_s += staging_s;
      row.source_mb = static_cast<double>(dataset_bytes_) / 1e6;
    }
    if (run.daemon) {
      count_mount(run, row);
      run.daemon->pause();
    } else if (run.scenario == "direct") {
      row.source_mb = static_cast<double>(row.figures.bytes) / 1e6;
    }
    if (row.scenario == "ideal") {
      ideal_[row.epoch] = row.figures.samples_per_s();
    }
    const double ideal = ideal_.count(row.epoch) ? ideal_[row.epoch] : 0;
    row.ratio_to_ideal = ideal > 0 ? row.figures.samples_per_s() / ideal : 0;
    rows_.push_back(row);
    print_row(row);
  }

  // The mount's hits and source bytes since its last turn. Copies still running when a turn
  // ends count in the next one.
  static void count_mount(Run& run, Row& row) {
    auto doc = read_stats(run.root);
    if (!doc) {
      return;
    }
    const double h = doc->number("hits").value_or(0);
    const double m = doc->number("misses").value_or(0);
    const double s = doc->number("bytes_from_source").value_or(0) +
                     doc->number("cache.bytes_staged").value_or(0);
    row.hit_rate = (h - run.hits) / std::max(1.0, h - run.hits + m - run.misses);
    row.source_mb = (s - run.source_bytes) / 1e6;
    run.hits = h;
    run.misses = m;
    run.source_bytes = s;
  }

  static void print_row(const Row& r) {
    char hit[16] = "-";
    if (r.hit_rate) {
      snprintf(hit, sizeof(hit), "%.3f", *r.hit_rate);
    }
    printf("%-12s %5zu %10.0f %7.1f%% %9.1f %9.1f %8.2f %8s %10.0f %9.1f\n", r.run.c_str(), r.epoch,
           r.figures.samples_per_s(), 100 * r.figures.stall_fraction(), r.figures.p50_wait_ms,
           r.figures.p99_wait_ms, r.ratio_to_ideal, hit, r.source_mb, r.staging_s);
    if (r.figures.errors > 0) {
      printf("             %zu files could not be read\n", static_cast<size_t>(r.figures.errors));
    }
    fflush(stdout);
  }

  const BenchOptions& o_;
  const std::string dir_;
  const std::string shared_;
  const std::vector<std::string> paths_;
  const uint64_t dataset_bytes_;
  std::vector<std::unique_ptr<Run>> runs_;
  std::vector<Row> rows_;
  std::map<size_t, double> ideal_;
};

void print_header(const BenchOptions& o, const StorageSettings& s, uint64_t bytes,
                  const StorageProbe& probe) {
  printf("dataset: %zu files, %.0f MB\n", o.files, static_cast<double>(bytes) / 1e6);
  if (o.source == "gluster") {
    printf("shared storage: GlusterFS over a veth pair limited to %.0f MB/s\n", s.bandwidth_mbs);
  } else {
    printf(
        "shared storage: emulated %s, %.2f ms per open and read, %.2f ms per lookup, %s, "
        "%u requests at once\n",
        o.storage.c_str(), s.latency_ms, s.meta_latency_ms,
        s.bandwidth_mbs > 0
            ? (std::to_string(static_cast<int>(s.bandwidth_mbs)) + " MB/s link").c_str()
            : "no bandwidth cap",
        s.max_inflight);
  }
  printf("  measured: %.2f ms per file (1 reader), %.0f files/s and %.0f MB/s (64 readers)\n",
         probe.per_file_ms, probe.files_per_s, probe.mb_per_s);
  printf(
      "trainer: batches of %zu, %u loader threads, %.1f ms compute per batch "
      "(at most %.0f samples/s)\n",
      o.trainer.batch, o.trainer.workers, o.trainer.compute_ms,
      static_cast<double>(o.trainer.batch) * 1000 / std::max(1e-3, o.trainer.compute_ms));
  printf("%-12s %5s %10s %8s %9s %9s %8s %8s %10s %9s\n", "run", "epoch", "samples/s", "stall",
         "p50 ms", "p99 ms", "/ideal", "hits", "source MB", "staging s");
}

// Whole-run samples/s of a run: all its samples over all its time.
std::map<std::string, double> whole_run_rates(const std::vector<Row>& rows) {
  std::map<std::string, std::pair<double, double>> totals;
  for (const Row& r : rows) {
    totals[r.run].first += static_cast<double>(r.figures.samples);
    totals[r.run].second += r.figures.seconds;
  }
  std::map<std::string, double> rates;
  for (const auto& [run, t] : totals) {
    rates[run] = t.second > 0 ? t.first / t.second : 0;
  }
  return rates;
}

// The ratios that matter, per cache size: epochfs against each other strategy over the
// whole run.
std::vector<std::pair<std::string, double>> summary_ratios(const BenchOptions& o,
                                                           const std::vector<Row>& rows) {
  const auto rates = whole_run_rates(rows);
  std::vector<std::pair<std::string, double>> ratios;
  for (double f : o.cache_fractions) {
    const std::string ours = run_name("epochfs", f);
    if (!rates.count(ours) || rates.at(ours) <= 0) {
      continue;
    }
    for (const std::string& other :
         {std::string("ideal"), std::string("direct"), run_name("lru", f), std::string("copy")}) {
      if (rates.count(other) && rates.at(other) > 0) {
        ratios.emplace_back(ours + "/" + other, rates.at(ours) / rates.at(other));
      }
    }
  }
  return ratios;
}

void print_summary(const std::vector<std::pair<std::string, double>>& ratios) {
  if (ratios.empty()) {
    return;
  }
  printf("whole run, samples/s:");
  for (const auto& [name, ratio] : ratios) {
    printf("  %s %.2f", name.c_str(), ratio);
  }
  printf("\n");
}

void write_row(std::ostream& out, const Row& r) {
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
  out << ", \"cache_fraction\": " << r.cache_fraction
      << ", \"source_bytes\": " << static_cast<uint64_t>(r.source_mb * 1e6)
      << ", \"staging_s\": " << r.staging_s << ", \"samples\": " << f.samples
      << ", \"bytes_read\": " << f.bytes << ", \"errors\": " << f.errors << "}";
}

struct Report {
  const BenchOptions& options;
  StorageSettings storage;
  StorageProbe probe;
  std::optional<double> storage_cpu_us_per_file;
  uint64_t dataset_bytes = 0;
  std::vector<Row> rows;
};

// The results as JSON: {"config", "storage", "results": {run: {epoch: {...}}}, "summary"}.
bool write_json(const std::string& path, const Report& rep) {
  const BenchOptions& o = rep.options;
  std::ofstream out(path);
  std::string fractions;
  for (double f : o.cache_fractions) {
    fractions += (fractions.empty() ? "" : ",") + std::to_string(f);
  }
  out << "{\n  \"config\": {\"files\": " << o.files << ", \"dataset_bytes\": " << rep.dataset_bytes
      << ", \"epochs\": " << o.epochs << ", \"batch\": " << o.trainer.batch
      << ", \"workers\": " << o.trainer.workers << ", \"compute_ms\": " << o.trainer.compute_ms
      << ", \"cache_fractions\": \"" << fractions << "\", \"stage_threads\": " << o.stage_threads
      << "},\n  \"storage\": {\"source\": \"" << o.source << "\", \"preset\": \"" << o.storage
      << "\", \"latency_ms\": " << rep.storage.latency_ms
      << ", \"meta_latency_ms\": " << rep.storage.meta_latency_ms
      << ", \"bandwidth_mbs\": " << rep.storage.bandwidth_mbs
      << ", \"max_inflight\": " << rep.storage.max_inflight
      << ", \"per_file_ms\": " << rep.probe.per_file_ms
      << ", \"files_per_s_64\": " << rep.probe.files_per_s
      << ", \"mb_per_s_64\": " << rep.probe.mb_per_s << ", \"cpu_us_per_file\": ";
  if (rep.storage_cpu_us_per_file) {
    out << *rep.storage_cpu_us_per_file;
  } else {
    out << "null";
  }
  out << "},\n  \"results\": {";
  // Runs take turns epoch by epoch: each run's epochs gathered under one key.
  std::vector<std::string> runs;
  for (const Row& r : rep.rows) {
    if (std::find(runs.begin(), runs.end(), r.run) == runs.end()) {
      runs.push_back(r.run);
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    out << (i ? "}," : "") << "\n    \"" << runs[i] << "\": {";
    bool first = true;
    for (const Row& r : rep.rows) {
      if (r.run == runs[i]) {
        out << (first ? "" : ",");
        write_row(out, r);
        first = false;
      }
    }
  }
  out << (runs.empty() ? "" : "}") << "\n  },\n  \"summary\": {";
  const auto ratios = summary_ratios(o, rep.rows);
  for (size_t i = 0; i < ratios.size(); ++i) {
    out << (i ? ", " : "") << "\"" << ratios[i].first << "\": " << ratios[i].second;
  }
  out << "}\n}\n";
  return static_cast<bool>(out);
}

// A PNG of samples/s per epoch per run, drawn by gnuplot.
bool write_plot(const std::string& png, const std::string& work_dir, const Report& rep) {
  const std::string script = work_dir + "/plot.gp";
  std::ofstream gp(script);
  std::map<std::string, std::vector<const Row*>> by_run;
  std::vector<std::string> order;
  for (const Row& r : rep.rows) {
    if (!by_run.count(r.run)) {
      order.push_back(r.run);
    }
    by_run[r.run].push_back(&r);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    gp << "$run" << i << " << EOD\n";
    for (const Row* r : by_run[order[i]]) {
      gp << r->epoch << " " << r->figures.samples_per_s() << "\n";
    }
    gp << "EOD\n";
  }
  const BenchOptions& o = rep.options;
  gp << "set terminal pngcairo size 900,560 font ',11'\nset output '" << png << "'\n"
     << "set title \"epochfs-lab bench: " << o.files << " files, "
     << (o.source == "gluster" ? std::string("GlusterFS") : o.storage) << ", batch "
     << o.trainer.batch << ", " << o.trainer.workers << " loaders, " << o.trainer.compute_ms
     << " ms compute\"\n"
     << "set xlabel 'epoch'\nset ylabel 'samples/s'\nset xtics 1\nset yrange [0:*]\n"
     << "set key outside right\nset grid\nplot ";
  for (size_t i = 0; i < order.size(); ++i) {
    gp << (i ? ", " : "") << "$run" << i << " using 1:2 with linespoints lw 2 title '" << order[i]
       << "'";
  }
  gp << "\n";
  gp.close();
  return run_to_end({"/usr/bin/env", "gnuplot", script}, std::chrono::seconds(60));
}

}  // namespace

int cmd_bench(const BenchOptions& o) {
  const std::string dir = make_work_dir(o.dir, "epochfs-bench");
  if (dir.empty()) {
    fprintf(stderr, "epochfs-lab bench: cannot make a work directory\n");
    return 1;
  }
  DatasetSpec spec;
  spec.num_files = o.files;
  spec.num_classes = std::max<size_t>(1, o.files / 1000);
  spec.mean_file_bytes = o.mean_kb * 1024;
  spec.seed = o.seed;
  auto paths = make_dataset(dir + "/data", spec);
  if (!paths.is_ok()) {
    fprintf(stderr, "epochfs-lab bench: %s\n", paths.status().to_string().c_str());
    return 1;
  }
  Report rep{o, resolve_storage(o), {}, std::nullopt, 0, {}};
  for (const auto& p : paths.value()) {
    rep.dataset_bytes += (fs::file_size(dir + "/data/" + p) + 4095) / 4096 * 4096;
  }
  bool complete = false;
  {
    SharedStorage storage(o, rep.storage, dir);
    if (!storage.up()) {
      fprintf(stderr, "epochfs-lab bench: the shared storage did not come up\n");
      return 1;
    }
    rep.probe = probe_storage(storage.path(), paths.value());
    print_header(o, rep.storage, rep.dataset_bytes, rep.probe);
    Bench bench(o, dir, storage.path(), std::move(paths).value(), rep.dataset_bytes);
    if (bench.prepare()) {
      bench.run_all();
    }
    rep.rows = bench.rows();
    if (auto cpu = storage.cpu_and_opens(); cpu && cpu->second > 0) {
      rep.storage_cpu_us_per_file = cpu->first * 1e6 / cpu->second;
      printf("the emulated storage used %.0f µs of CPU per file opened\n",
             *rep.storage_cpu_us_per_file);
    }
    size_t runs = 0;
    for (const auto& s : o.scenarios) {
      runs += s == "lru" || s == "epochfs" ? o.cache_fractions.size() : 1;
    }
    complete = rep.rows.size() == o.epochs * runs;
  }
  print_summary(summary_ratios(o, rep.rows));
  if (!o.json.empty() && !write_json(o.json, rep)) {
    fprintf(stderr, "epochfs-lab bench: cannot write %s\n", o.json.c_str());
    return 1;
  }
  if (!o.plot.empty() && !write_plot(o.plot, dir, rep)) {
    fprintf(stderr, "epochfs-lab bench: gnuplot could not draw %s (is gnuplot installed?)\n",
            o.plot.c_str());
  }
  if (o.dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return complete ? 0 : 1;
}

}  // namespace epochfs::tools
