// `epochfs demo`: make a sample dataset, mount it, and read it through the mount and directly,
// side by side in one run (the machines are shared, so only ratios measured together count).
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "tools/commands.h"
#include "tools/dataset.h"
#include "tools/process.h"
#include "tools/read_bench.h"
#include "tools/stats_doc.h"

namespace epochfs::tools {
namespace {

constexpr auto kMountTimeout = std::chrono::seconds(20);

// The median of `rounds` runs; direct and mount runs alternate so drift hits both alike.
struct SideBySide {
  ReadFigures direct;
  ReadFigures mount;
};

ReadFigures median(std::vector<ReadFigures> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const ReadFigures& a, const ReadFigures& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

ReadFigures one_pass(const std::string& root, const std::vector<std::string>& paths,
                     unsigned threads, bool cold) {
  if (cold && !drop_page_cache()) {
    fprintf(stderr, "epochfs demo: cannot drop the page cache (needs root)\n");
  }
  return read_files(root, paths, threads);
}

SideBySide measure(const std::string& src, const std::string& mnt,
                   const std::vector<std::string>& paths, unsigned threads, unsigned rounds,
                   bool cold) {
  std::vector<ReadFigures> direct, mount;
  for (unsigned r = 0; r < rounds; ++r) {
    direct.push_back(one_pass(src, paths, threads, cold));
    mount.push_back(one_pass(mnt, paths, threads, cold));
  }
  return {median(direct), median(mount)};
}

void print_row(unsigned threads, const SideBySide& m) {
  printf("%7u  %12.0f %9.0f  %12.0f %9.0f  %6.2f\n", threads, m.direct.files_per_s(),
         m.direct.mb_per_s(), m.mount.files_per_s(), m.mount.mb_per_s(),
         m.mount.files_per_s() / m.direct.files_per_s());
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

// The first read of every file, the cache empty: what read-through costs over reading the
// source directly.
int first_read(const std::string& src, const std::string& mnt,
               const std::vector<std::string>& paths, unsigned threads) {
  const ReadFigures direct = one_pass(src, paths, threads, true);
  const ReadFigures mount = one_pass(mnt, paths, threads, true);
  printf("\nfirst read, cache empty, cold page cache, %u threads\n", threads);
  printf("threads  direct files/s      MB/s   mount files/s      MB/s  ratio\n");
  print_row(threads, SideBySide{direct, mount});
  wait_for_staging(mnt);
  return direct.errors + mount.errors == 0 ? 0 : 1;
}

int run_demo(const DemoOptions& o, const std::string& dir) {
  const std::string src = dir + "/source";
  const std::string mnt = dir + "/mnt";
  DatasetSpec spec;
  spec.num_files = o.files;
  spec.num_classes = std::max<size_t>(1, o.files / 100);
  printf("epochfs demo: dataset of %zu files (lognormal, mean 110 KB) in %s\n", o.files,
         src.c_str());
  fflush(stdout);
  auto paths = make_dataset(src, spec);
  if (!paths.is_ok()) {
    fprintf(stderr, "epochfs demo: %s\n", paths.status().to_string().c_str());
    return 1;
  }
  std::filesystem::create_directories(mnt);
  // The daemon shares our terminal: only its warnings belong in the demo's output.
  std::vector<std::string> argv = {self_exe(), "mount", "--foreground", "--log-level", "warning",
                                   src,        mnt};
  if (o.immutable) {
    argv.push_back("--immutable");
  }
  if (o.no_cache) {
    argv.push_back("--no-cache");
  }
  argv.insert(argv.end(), o.mount_args.begin(), o.mount_args.end());
  const pid_t pid = spawn(argv);
  if (pid < 0 || !wait_for_mount(mnt, "fuse.epochfs", pid, kMountTimeout)) {
    fprintf(stderr, "epochfs demo: the mount did not come up\n");
    stop_mount(mnt, pid, kMountTimeout);
    return 1;
  }
  printf("mounted at %s%s\n", mnt.c_str(), o.immutable ? " (--immutable)" : "");
  int rc = 0;
  if (o.cold) {
    rc |= first_read(src, mnt, paths.value(), o.threads.back());
  }
  read_files(src, paths.value(), 4);
  rc |= read_files(mnt, paths.value(), 4).errors == 0 ? 0 : 1;
  wait_for_staging(mnt);
  printf("\n%s page cache, files %s, whole-file reads, median of %u rounds\n",
         o.cold ? "cold" : "hot", o.no_cache ? "read from the source" : "in the cache", o.rounds);
  printf("threads  direct files/s      MB/s   mount files/s      MB/s  ratio\n");
  for (unsigned t : o.threads) {
    const SideBySide m = measure(src, mnt, paths.value(), t, o.rounds, o.cold);
    print_row(t, m);
    rc |= (m.direct.errors + m.mount.errors) == 0 ? 0 : 1;
  }
  auto code = stop_mount(mnt, pid, kMountTimeout);
  if (code != 0) {
    fprintf(stderr, "epochfs demo: the daemon did not exit cleanly\n");
    rc = 1;
  }
  if (rc != 0) {
    fprintf(stderr, "epochfs demo: some reads failed\n");
  }
  return rc;
}

}  // namespace

int cmd_demo(const DemoOptions& o) {
  const std::string dir = make_work_dir(o.dir, "epochfs-demo");
  if (dir.empty()) {
    fprintf(stderr, "epochfs demo: cannot create a work directory\n");
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
