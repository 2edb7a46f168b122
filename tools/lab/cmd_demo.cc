// `epochfs-lab demo`: make a sample dataset, mount it, and read it through the mount and directly,
// and through peers mounted over the same source (--peer), side by side in one run (the
// machines are shared, so only ratios measured together count).
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli/stats_doc.h"
#include "tools/lab/commands.h"
#include "tools/lab/dataset.h"
#include "tools/lab/process.h"
#include "tools/lab/read_bench.h"

namespace epochfs::tools {
namespace {

constexpr auto kMountTimeout = std::chrono::seconds(20);

// A filesystem read in the comparison: the source directly, the epochfs mount, a peer's.
struct Target {
  std::string name;
  std::string root;
};

// The median of `rounds` runs per target; the targets' runs alternate, so drift hits all alike.
using Medians = std::vector<ReadFigures>;

ReadFigures median(std::vector<ReadFigures> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const ReadFigures& a, const ReadFigures& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

// How a pass starts: hot, or with the page cache dropped (with or without dentries and inodes).
enum class Start { kHot, kCold, kColdPages };

ReadFigures one_pass(const std::string& root, const std::vector<std::string>& paths,
                     unsigned threads, Start start) {
  if (start != Start::kHot && !drop_page_cache(start == Start::kColdPages)) {
    fprintf(stderr, "epochfs-lab demo: cannot drop the page cache (needs root)\n");
  }
  return read_files(root, paths, threads);
}

Medians measure(const std::vector<Target>& targets, const std::vector<std::string>& paths,
                unsigned threads, unsigned rounds, Start start) {
  std::vector<std::vector<ReadFigures>> runs(targets.size());
  for (unsigned r = 0; r < rounds; ++r) {
    for (size_t t = 0; t < targets.size(); ++t) {
      runs[t].push_back(one_pass(targets[t].root, paths, threads, start));
    }
  }
  Medians out;
  for (auto& r : runs) {
    out.push_back(median(std::move(r)));
  }
  return out;
}

// The first target is the direct read every other is compared with.
void print_header(const std::vector<Target>& targets) {
  printf("threads  %14s      MB/s", (targets[0].name + " files/s").c_str());
  for (size_t t = 1; t < targets.size(); ++t) {
    printf("  %14s      MB/s  ratio", (targets[t].name + " files/s").c_str());
  }
  printf("\n");
}

void print_row(unsigned threads, const Medians& m) {
  printf("%7u  %14.0f %9.0f", threads, m[0].files_per_s(), m[0].mb_per_s());
  for (size_t t = 1; t < m.size(); ++t) {
    printf("  %14.0f %9.0f  %5.2f", m[t].files_per_s(), m[t].mb_per_s(),
           m[t].files_per_s() / m[0].files_per_s());
  }
  printf("\n");
}

uint64_t errors_of(const Medians& m) {
  uint64_t errors = 0;
  for (const auto& f : m) {
    errors += f.errors;
  }
  return errors;
}

// How to mount a peer over the source, read-only and tuned for reading, as its documentation
// suggests.
struct PeerSpec {
  const char* name;
  const char* fstype;
  std::vector<std::string> (*argv)(const std::string& src, const std::string& mnt,
                                   const std::string& scratch);
};

const PeerSpec kPeers[] = {
    {"bindfs", "fuse",
     [](const std::string& src, const std::string& mnt, const std::string&) {
       return std::vector<std::string>{"bindfs", "-f", "--multithreaded", "-o", "ro", src, mnt};
     }},
    {"mergerfs", "fuse.mergerfs",
     [](const std::string& src, const std::string& mnt, const std::string&) {
       return std::vector<std::string>{"mergerfs", "-f", "-o", "ro,cache.files=auto-full",
                                       src,        mnt};
     }},
    {"rclone", "fuse.rclone",
     [](const std::string& src, const std::string& mnt, const std::string& scratch) {
       return std::vector<std::string>{
           "rclone", "mount",       src,     mnt,           "--read-only", "--vfs-cache-mode",
           "full",   "--cache-dir", scratch, "--log-level", "ERROR"};
     }},
};

const PeerSpec* find_peer(const std::string& name) {
  for (const auto& p : kPeers) {
    if (name == p.name) {
      return &p;
    }
  }
  return nullptr;
}

// Waits until the mount has no copy in flight, so later passes measure the cache.
void wait_for_staging(const std::string& mnt) {
  for (int i = 0; i < 6000; ++i) {
    auto doc = read_stats(mnt);
    if (!doc || doc->number("cache.copies_queued").value_or(0) == 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// What the daemon has spent so far: its CPU (all its threads) and the requests and opens its
// stats count. Read around the measured rounds, whose direct reads leave it idle.
struct DaemonCost {
  double cpu_s = 0;
  double requests = 0;
  double opens = 0;
};

DaemonCost daemon_cost(pid_t pid, const std::string& mnt) {
  DaemonCost c;
  c.cpu_s = cpu_seconds(pid).value_or(0);
  if (auto doc = read_stats(mnt)) {
    c.requests = doc->number("requests.per_open").value_or(0) * doc->number("opens").value_or(0);
    c.opens = doc->number("opens").value_or(0);
  }
  return c;
}

void print_daemon_cost(const DaemonCost& before, const DaemonCost& after) {
  const double opens = after.opens - before.opens;
  if (opens <= 0) {
    return;
  }
  printf("epochfs daemon in these rounds: %.1f us of CPU and %.2f requests per open (%.0f opens)\n",
         1e6 * (after.cpu_s - before.cpu_s) / opens, (after.requests - before.requests) / opens,
         opens);
}

// The first read of every file, the cache empty: what read-through costs over reading the
// source directly.
int first_read(const std::string& src, const std::string& mnt,
               const std::vector<std::string>& paths, unsigned threads) {
  const Medians m = {one_pass(src, paths, threads, Start::kCold),
                     one_pass(mnt, paths, threads, Start::kCold)};
  printf("\nfirst read, cache empty, cold page cache, %u threads\n", threads);
  print_header({{"direct", src}, {"epochfs", mnt}});
  print_row(threads, m);
  wait_for_staging(mnt);
  return errors_of(m) == 0 ? 0 : 1;
}

// The mean time of n fstat() calls on path under each target; 1 if a file would not open.
int print_round_trips(const std::vector<Target>& targets, const std::string& path, unsigned n) {
  printf("\nfstat() of one open file, %u calls: mean time per call\n", n);
  for (const auto& t : targets) {
    const int fd = ::open((t.root + "/" + path).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return 1;
    }
    struct stat st;
    const auto start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < n; ++i) {
      ::fstat(fd, &st);
    }
    const std::chrono::duration<double, std::micro> spent =
        std::chrono::steady_clock::now() - start;
    ::close(fd);
    printf("  %-10s %8.2f us\n", t.name.c_str(), spent.count() / n);
  }
  return 0;
}

int run_demo(const DemoOptions& o, const std::string& dir) {
  const std::string src = dir + "/source";
  const std::string mnt = dir + "/mnt";
  DatasetSpec spec;
  spec.num_files = o.files;
  spec.num_classes = std::max<size_t>(1, o.files / 100);
  spec.mean_file_bytes = o.mean_kb * 1024;
  printf("epochfs-lab demo: dataset of %zu files (lognormal, mean %.0f KB) in %s\n", o.files,
         o.mean_kb, src.c_str());
  fflush(stdout);
  auto paths = make_dataset(src, spec);
  if (!paths.is_ok()) {
    fprintf(stderr, "epochfs-lab demo: %s\n", paths.status().to_string().c_str());
    return 1;
  }
  std::filesystem::create_directories(mnt);
  // The daemon shares our terminal: only its warnings belong in the demo's output.
  std::vector<std::string> argv = {
      sibling_binary("epochfs"), "mount", "--foreground", "--log-level", "warning", src, mnt};
  if (o.immutable) {
    argv.push_back("--immutable");
  }
  if (o.no_cache) {
    argv.push_back("--no-cache");
  }
  argv.insert(argv.end(), o.mount_args.begin(), o.mount_args.end());
  const pid_t pid = spawn(argv);
  if (pid < 0 || !wait_for_mount(mnt, "fuse.epochfs", pid, kMountTimeout)) {
    fprintf(stderr, "epochfs-lab demo: the mount did not come up\n");
    stop_mount(mnt, pid, kMountTimeout);
    return 1;
  }
  printf("mounted at %s%s\n", mnt.c_str(), o.immutable ? " (--immutable)" : "");
  int rc = 0;
  if (o.cold) {
    rc |= first_read(src, mnt, paths.value(), o.threads.back());
  }
  std::vector<Target> targets = {{"direct", src}, {"epochfs", mnt}};
  std::vector<std::unique_ptr<MountedDaemon>> peers;
  for (const auto& name : o.peers) {
    const PeerSpec& peer = *find_peer(name);
    const std::string peer_mnt = dir + "/peer-" + name;
    peers.push_back(std::make_unique<MountedDaemon>(peer.argv(src, peer_mnt, peer_mnt + ".cache"),
                                                    peer_mnt, peer.fstype, kMountTimeout));
    if (!peers.back()->up()) {
      fprintf(stderr, "epochfs-lab demo: %s did not mount; left out\n", name.c_str());
      continue;
    }
    targets.push_back({name, peer_mnt});
  }
  // The source's pages so far are those its files were written with, which this kernel reads
  // back faster than pages read in from disk (docs/benchmarks.md, "Running the lab"), and a
  // dataset on disk is read in: dropped, so that every target's pages come from reading.
  if (!drop_page_cache()) {
    printf("(not root: the direct reads' pages are those the dataset was written with)\n");
  }
  // One pass through each first: copies staged, a peer's own cache filled.
  for (const auto& t : targets) {
    rc |= read_files(t.root, paths.value(), 4).errors == 0 ? 0 : 1;
  }
  wait_for_staging(mnt);
  const Start start = !o.cold ? Start::kHot : o.pages_only ? Start::kColdPages : Start::kCold;
  printf("\n%s, files %s, whole-file reads, median of %u rounds\n",
         start == Start::kHot    ? "hot page cache"
         : start == Start::kCold ? "cold page cache"
                                 : "cold page cache, dentries and inodes kept",
         o.no_cache ? "read from the source" : "in the cache", o.rounds);
  print_header(targets);
  const DaemonCost before = daemon_cost(pid, mnt);
  for (unsigned t : o.threads) {
    const Medians m = measure(targets, paths.value(), t, o.rounds, start);
    print_row(t, m);
    rc |= errors_of(m) == 0 ? 0 : 1;
  }
  print_daemon_cost(before, daemon_cost(pid, mnt));
  if (o.round_trips > 0) {
    rc |= print_round_trips(targets, paths.value().front(), o.round_trips);
  }
  peers.clear();
  auto code = stop_mount(mnt, pid, kMountTimeout);
  if (code != 0) {
    fprintf(stderr, "epochfs-lab demo: the daemon did not exit cleanly\n");
    rc = 1;
  }
  if (rc != 0) {
    fprintf(stderr, "epochfs-lab demo: some reads failed\n");
  }
  return rc;
}

}  // namespace

int cmd_demo(const DemoOptions& o) {
  const std::string dir = make_work_dir(o.dir, "epochfs-demo");
  if (dir.empty()) {
    fprintf(stderr, "epochfs-lab demo: cannot create a work directory\n");
    return 1;
  }
  const int rc = run_demo(o, dir);
  if (!o.keep && o.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return rc;
}

}  // namespace epochfs::tools
