// epochfs-lab bench-policy: hit rates of the cache's eviction policies on shuffled epochs, and the
// memory the prefetch engine holds per file, by driving the engine's own classes (Schedule,
// NextUsePolicy, LruPolicy, FileRegistry) with a synthetic trace, without a mount.
//
// Each epoch is a fresh uniform shuffle of the whole dataset, every file the same size, the
// cache a fraction f of the dataset, no prefetch: what the policy alone achieves. The bound
// for known-future eviction with bypass is exactly f (keep a fixed set, never churn); LRU gets
// about f + (1-f)ln(1-f) from the second epoch on.
#include <malloc.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cachestore/cache_store.h"
#include "cachestore/eviction_policy.h"
#include "cachestore/kept_versions.h"
#include "fusefs/inode_table.h"
#include "prefetch/file_registry.h"
#include "prefetch/schedule.h"
#include "tools/lab/commands.h"

namespace epochfs::tools {
namespace {

using cachestore::FileId;
using prefetch::Schedule;

class ScheduleOracle final : public cachestore::NextUseOracle {
 public:
  explicit ScheduleOracle(Schedule& s) : s_(s) {}

  uint64_t next_use(FileId id) override { return s_.next_use(id); }

 private:
  Schedule& s_;
};

std::vector<FileId> shuffled(size_t files, uint32_t seed) {
  std::vector<FileId> order(files);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

// Hits per epoch of `policy` for a cache of `capacity` files. With a schedule, every epoch is
// published one epoch ahead, as a sampler wrapper does, and opens advance it.
std::vector<uint64_t> run_policy(cachestore::EvictionPolicy& policy, Schedule* schedule,
                                 size_t files, size_t capacity, int epochs) {
  std::vector<bool> cached(files, false);
  size_t resident = 0;
  std::vector<uint64_t> hits;
  if (schedule != nullptr) {
    (void)schedule->publish("rank0", 0, shuffled(files, 1000));
  }
  for (int e = 0; e < epochs; ++e) {
    const auto order = shuffled(files, 1000 + static_cast<uint32_t>(e));
    if (schedule != nullptr && e + 1 < epochs) {
      (void)schedule->publish("rank0", e + 1, shuffled(files, 1001 + static_cast<uint32_t>(e)));
    }
    uint64_t h = 0;
    for (FileId f : order) {
      if (schedule != nullptr) {
        (void)schedule->on_open(f);
      }
      if (cached[f]) {
        ++h;
        policy.accessed(f);
        continue;
      }
      if (resident < capacity) {
        cached[f] = true;
        ++resident;
        policy.inserted(f);
        continue;
      }
      auto victim = policy.choose_victim([](FileId) { return true; });
      if (victim && policy.worth_evicting(f, *victim)) {
        policy.removed(*victim);
        cached[*victim] = false;
        cached[f] = true;
        policy.inserted(f);
      }
    }
    hits.push_back(h);
  }
  return hits;
}

// Heap in use, counting the large blocks malloc maps separately.
size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Heap bytes per file of the registry and of a schedule holding two epochs (the current and
// the next), for `files` ImageNet-like paths.
std::string imagenet_path(size_t i) {
  char path[64];
  snprintf(path, sizeof(path), "n%08zu/n%08zu_%zu.JPEG", i % 1000, i % 1000, i);
  return path;
}

// The inode table when the kernel holds a node for each of the registry's files (after an
// epoch), and what is left once it has let go of them all.
void print_inode_memory(prefetch::FileRegistry& registry, size_t files) {
  const auto node = [](ino_t ino, mode_t type) {
    struct stat st = {};
    st.st_dev = 1;
    st.st_ino = ino;
    st.st_mode = type;
    st.st_nlink = 1;  // a dataset's file: one name
    return st;
  };
  std::vector<fusefs::InodeId> ids(files);
  const size_t before = heap_in_use();
  auto inodes = std::make_unique<fusefs::InodeTable>(node(2, S_IFDIR), registry);
  for (size_t i = 0; i < files; ++i) {
    ids[i] = inodes->add_reference(node(100 + i, S_IFREG), imagenet_path(i));
  }
  const size_t held = heap_in_use();
  for (const fusefs::InodeId id : ids) {
    inodes->forget(id, 1);
  }
  inodes->shrink_if_mostly_forgotten();
  const size_t let_go = heap_in_use();
  const double n = static_cast<double>(files);
  printf("  inode table, a node held for each file: %.1f bytes per file; all let go: %.1f\n",
         static_cast<double>(held - before) / n, static_cast<double>(let_go - before) / n);
}

// A cached copy's entry and its place in the eviction policy, entered as a kept copy is (no
// copy is made: adopt() only files it).
void print_cache_memory(size_t files) {
  char root[] = "/tmp/epochfs-bench-cache-XXXXXX";
  if (::mkdtemp(root) == nullptr) {
    return;
  }
  {
    cachestore::CacheOptions options;
    options.root = root;
    options.source_key = "/bench-policy";
    auto store = cachestore::CacheStore::open(options, std::make_unique<cachestore::LruPolicy>());
    if (!store.is_ok()) {
      return;
    }
    const size_t opened = heap_in_use();
    cachestore::FileVersion version;
    version.size = 2048;
    for (size_t i = 0; i < files; ++i) {
      version.ino = 100 + i;
      store.value()->adopt(static_cast<cachestore::FileId>(i),
                           cachestore::KeptCopy{imagenet_path(i), 2048, version, i});
    }
    const double adopted = static_cast<double>(heap_in_use() - opened) / static_cast<double>(files);
    // The store keeps a kept copy's version until its first open: the same structure alone.
    const size_t before_kept = heap_in_use();
    cachestore::KeptVersions kept;
    for (size_t i = 0; i < files; ++i) {
      kept.set(static_cast<cachestore::FileId>(i), version);
    }
    const double versions =
        static_cast<double>(heap_in_use() - before_kept) / static_cast<double>(files);
    printf(
        "  cache entries and their LRU list, a copy of each file: %.1f bytes per file; "
        "kept by an earlier mount and not yet opened: %.1f\n",
        adopted - versions, adopted);
  }
  ::rmdir(root);
  // The daemon replaces the LRU list by the next-use policy: its links, alone, to subtract.
  const size_t before_lru = heap_in_use();
  cachestore::LruPolicy lru;
  for (size_t i = 0; i < files; ++i) {
    lru.inserted(static_cast<cachestore::FileId>(i));
  }
  printf("  of which the LRU list: %.1f bytes per file\n",
         static_cast<double>(heap_in_use() - before_lru) / static_cast<double>(files));
}

void print_memory(size_t files) {
  const size_t before = heap_in_use();
  auto registry = std::make_unique<prefetch::FileRegistry>();
  for (size_t i = 0; i < files; ++i) {
    registry->id_of(imagenet_path(i));
  }
  const size_t after_registry = heap_in_use();
  auto schedule = std::make_unique<Schedule>();
  (void)schedule->publish("rank0", 0, shuffled(files, 1));
  (void)schedule->publish("rank0", 1, shuffled(files, 2));
  const size_t after_schedule = heap_in_use();
  const double n = static_cast<double>(files);
  printf("memory for %zu files, two epochs published:\n", files);
  printf("  file registry (path, version): %.1f bytes per file\n",
         static_cast<double>(after_registry - before) / n);
  printf(
      "  schedule: %.1f MB on the heap for %zu entries and %zu files "
      "(model: 8 bytes per entry + 8 per file = %.1f MB)\n",
      static_cast<double>(after_schedule - after_registry) / 1e6,
      static_cast<size_t>(schedule->entries_held()), schedule->files_tracked(),
      static_cast<double>(8 * schedule->entries_held() + 8 * schedule->files_tracked()) / 1e6);
  schedule.reset();
  print_inode_memory(*registry, files);
  print_cache_memory(files);
}

// The longest single call into the next-use policy while `files` resident copies are each hit
// three times (each hit re-keys its file in the heap): the CacheStore calls
// the policy with its lock held, so this is how long every open of a cached file can wait.
void print_longest_policy_call(size_t files) {
  struct Scattered : cachestore::NextUseOracle {
    uint64_t next_use(FileId id) override { return (uint64_t{id} * 2654435761u) % 1000003; }
  } oracle;

  const size_t before = heap_in_use();
  cachestore::NextUsePolicy policy(oracle);
  for (size_t i = 0; i < files; ++i) {
    policy.inserted(static_cast<FileId>(i));
  }
  double longest = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < files; ++i) {
      const auto start = std::chrono::steady_clock::now();
      policy.accessed(static_cast<FileId>(i));
      longest = std::max(
          longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  printf(
      "  next-use policy, %zu copies hit 3 times each: longest call %.1f ms, %.1f bytes per "
      "file\n",
      files, longest * 1e3,
      static_cast<double>(heap_in_use() - before) / static_cast<double>(files));
}

}  // namespace

int cmd_bench_policy(const BenchPolicyOptions& o) {
  printf("policy hit rates, %zu files, %d epochs, a fresh shuffle each epoch, no prefetch\n",
         o.files, o.epochs);
  printf("%-8s %-22s %-22s %-8s %s\n", "cache", "known future (epochfs)", "LRU", "bound f",
         "LRU model, epochs 2+");
  for (double f : o.fractions) {
    const auto capacity = static_cast<size_t>(f * static_cast<double>(o.files));
    Schedule schedule;
    ScheduleOracle oracle(schedule);
    cachestore::NextUsePolicy known(oracle);
    cachestore::LruPolicy lru;
    const auto a = run_policy(known, &schedule, o.files, capacity, o.epochs);
    const auto b = run_policy(lru, nullptr, o.files, capacity, o.epochs);
    // Epochs 2 and later: the first epoch starts from an empty cache for every policy.
    const auto later = [&](const std::vector<uint64_t>& h) {
      const uint64_t sum = std::accumulate(h.begin() + 1, h.end(), uint64_t{0});
      return static_cast<double>(sum) / static_cast<double>(o.files * (h.size() - 1));
    };
    const auto all = [&](const std::vector<uint64_t>& h) {
      return static_cast<double>(std::accumulate(h.begin(), h.end(), uint64_t{0})) /
             static_cast<double>(o.files * h.size());
    };
    char ka[32], lb[32];
    snprintf(ka, sizeof(ka), "%.3f (all %.3f)", later(a), all(a));
    snprintf(lb, sizeof(lb), "%.3f (all %.3f)", later(b), all(b));
    printf("%-8.2f %-22s %-22s %-8.3f %.3f\n", f, ka, lb, f, f + (1 - f) * std::log(1 - f));
  }
  if (o.memory_files > 0) {
    print_memory(o.memory_files);
    print_longest_policy_call(o.memory_files);
  }
  return 0;
}

}  // namespace epochfs::tools
