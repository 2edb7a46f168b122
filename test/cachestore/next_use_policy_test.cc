// NextUsePolicy against brute force: on random traces it must get exactly the hits of
// Belady's MIN with bypass; it must honour refusals (pinned files), fall back to LRU for files
// with no known next use, and notice files that gain or lose a future.
#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/eviction_policy.h"

namespace epochfs::cachestore {
namespace {

constexpr uint64_t kNever = NextUseOracle::kNever;

bool any(FileId /*id*/) { return true; }

// One of files (not empty), picked at random.
FileId any_of(const std::set<FileId>& files, std::mt19937& rng) {
  auto it = files.begin();
  std::advance(it, static_cast<long>(rng() % files.size()));
  return *it;
}

// The future as a fixed trace: next_use(f) is the position of f's next access after now.
class TraceOracle final : public NextUseOracle {
 public:
  explicit TraceOracle(std::vector<FileId> trace) : trace_(std::move(trace)) {}

  uint64_t next_use(FileId id) override {
    for (size_t t = now_ + 1; t < trace_.size(); ++t) {
      if (trace_[t] == id) {
        return t;
      }
    }
    return kNever;
  }

  void set_now(size_t t) { now_ = t; }

 private:
  std::vector<FileId> trace_;
  size_t now_ = 0;
};

// A settable future per file.
class MapOracle final : public NextUseOracle {
 public:
  uint64_t next_use(FileId id) override {
    auto it = uses_.find(id);
    return it == uses_.end() ? kNever : it->second;
  }

  bool repeats(FileId id) override { return repeated_.count(id) != 0; }

  bool this_epoch_only(FileId id) override { return this_epoch_.count(id) != 0; }

  std::map<FileId, uint64_t> uses_;
  std::set<FileId> repeated_;
  std::set<FileId> this_epoch_;
};

uint64_t belady_hits(const std::vector<FileId>& trace, size_t capacity) {
  TraceOracle oracle(trace);
  std::set<FileId> cached;
  uint64_t hits = 0;
  for (size_t t = 0; t < trace.size(); ++t) {
    oracle.set_now(t);
    const FileId f = trace[t];
    if (cached.count(f) != 0) {
      ++hits;
      continue;
    }
    if (cached.size() < capacity) {
      cached.insert(f);
      continue;
    }
    FileId far = *cached.begin();
    for (FileId c : cached) {
      if (oracle.next_use(c) > oracle.next_use(far)) {
        far = c;
      }
    }
    if (oracle.next_use(f) < oracle.next_use(far)) {
      cached.erase(far);
      cached.insert(f);
    }
  }
  return hits;
}

uint64_t policy_hits(const std::vector<FileId>& trace, size_t capacity) {
  TraceOracle oracle(trace);
  NextUsePolicy policy(oracle);
  std::set<FileId> cached;
  uint64_t hits = 0;
  for (size_t t = 0; t < trace.size(); ++t) {
    oracle.set_now(t);
    const FileId f = trace[t];
    if (cached.count(f) != 0) {
      ++hits;
      policy.accessed(f);
      continue;
    }
    if (cached.size() < capacity) {
      cached.insert(f);
      policy.inserted(f);
      continue;
    }
    auto victim = policy.choose_victim(any);
    REQUIRE(victim.has_value());
    REQUIRE(cached.count(*victim) == 1);
    if (policy.worth_evicting(f, *victim)) {
      policy.removed(*victim);
      cached.erase(*victim);
      cached.insert(f);
      policy.inserted(f);
    }
  }
  CHECK(policy.size() == cached.size());
  return hits;
}

}  // namespace

TEST_CASE("NextUsePolicy gets Belady's hits on random traces", "[next_use]") {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    const FileId files = 20 + seed % 40;
    const size_t capacity = 3 + seed % 15;
    std::vector<FileId> trace(600);
    // Shuffled epochs, as a trainer reads, and uniform random accesses, alternately.
    if (seed % 2 == 0) {
      trace.clear();
      while (trace.size() < 600) {
        std::vector<FileId> epoch(files);
        for (FileId i = 0; i < files; ++i) {
          epoch[i] = i;
        }
        std::shuffle(epoch.begin(), epoch.end(), rng);
        trace.insert(trace.end(), epoch.begin(), epoch.end());
      }
    } else {
      std::uniform_int_distribution<FileId> pick(0, files - 1);
      for (auto& f : trace) {
        f = pick(rng);
      }
    }
    INFO("seed " << seed << ", " << files << " files, capacity " << capacity);
    CHECK(policy_hits(trace, capacity) == belady_hits(trace, capacity));
  }
}

TEST_CASE("NextUsePolicy picks the farthest file it may evict", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  oracle.uses_ = {{1, 10}, {2, 30}, {3, 20}};
  for (FileId id : {1, 2, 3}) {
    policy.inserted(id);
  }
  CHECK(policy.choose_victim(any) == FileId{2});
  // 2 is pinned: the next farthest goes.
  CHECK(policy.choose_victim([](FileId id) { return id != 2; }) == FileId{3});
  CHECK(policy.choose_victim([](FileId) { return false; }) == std::nullopt);
  // Refusals leave everything in place.
  CHECK(policy.size() == 3);
  CHECK(policy.choose_victim(any) == FileId{2});
}

TEST_CASE("files with no known next use go first, oldest first", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  oracle.uses_ = {{1, 5}};
  for (FileId id : {1, 2, 3, 4}) {
    policy.inserted(id);  // 2, 3, 4: no future
  }
  policy.accessed(2);  // 3 is now the least recently used of them
  CHECK(policy.choose_victim(any) == FileId{3});
  policy.removed(3);
  CHECK(policy.choose_victim(any) == FileId{4});
  // A file with no future is not worth evicting one that has one, and vice versa.
  CHECK_FALSE(policy.worth_evicting(9, 1));
  CHECK(policy.worth_evicting(1, 4));
  CHECK(policy.worth_evicting(9, 4));  // two without a future: LRU replaces
}

TEST_CASE("a repeated file displaces only a file with no known future", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  oracle.uses_ = {{1, 5}, {2, 50}};
  oracle.repeated_ = {1};
  CHECK_FALSE(policy.worth_evicting(1, 2));  // 2 is needed later, but needed
  CHECK(policy.worth_evicting(1, 4));        // 4 has no future
  oracle.repeated_.clear();
  CHECK(policy.worth_evicting(1, 2));  // once an epoch: Belady's rule
}

TEST_CASE("a block with no use past its epoch displaces nothing", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  oracle.uses_ = {{1, 5}, {2, 50}};
  oracle.this_epoch_ = {1};
  CHECK_FALSE(policy.worth_evicting(1, 2));
  CHECK_FALSE(policy.worth_evicting(1, 4));  // not even a copy with no future
  oracle.this_epoch_.clear();
  CHECK(policy.worth_evicting(1, 2));
}

TEST_CASE("without any known future NextUsePolicy is LRU", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  LruPolicy lru;
  std::mt19937 rng(5);
  std::set<FileId> resident;
  for (int step = 0; step < 2000; ++step) {
    const FileId id = rng() % 50;
    if (resident.count(id) != 0) {
      policy.accessed(id);
      lru.accessed(id);
    } else if (resident.size() < 20) {
      resident.insert(id);
      policy.inserted(id);
      lru.inserted(id);
    } else {
      const auto a = policy.choose_victim(any);
      const auto b = lru.choose_victim(any);
      REQUIRE(a == b);
      policy.removed(*a);
      lru.removed(*b);
      resident.erase(*a);
    }
  }
}

TEST_CASE("a file's key follows its future as orders change", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  oracle.uses_ = {{1, 100}, {2, 50}};
  policy.inserted(1);
  policy.inserted(2);
  policy.inserted(3);  // no future
  CHECK(policy.choose_victim(any) == FileId{3});
  oracle.uses_[3] = 10;  // a new order needs 3 soon
  CHECK(policy.choose_victim(any) == FileId{1});
  oracle.uses_[1] = 5;  // and 1 sooner still
  CHECK(policy.choose_victim(any) == FileId{2});
  oracle.uses_.erase(2);  // 2's order was replaced: no future any more
  CHECK(policy.choose_victim(any) == FileId{2});
}

// Each hit re-keys its file in place: the heap holds one entry per resident file with a known
// future whatever the hits, so no call ever has stale entries to sweep under the cache's lock.
TEST_CASE("hits re-key in place: one heap entry per resident file", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  constexpr FileId kFiles = 5000;
  for (FileId id = 0; id < kFiles; ++id) {
    oracle.uses_[id] = (uint64_t{id} * 7919) % 10007;
    policy.inserted(id);
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    for (FileId id = 0; id < kFiles; ++id) {
      oracle.uses_[id] = rng() % 100000;
      policy.accessed(id);
    }
    CHECK(policy.heap_entries() == kFiles);
  }
  oracle.uses_.erase(17);  // no future: leaves the heap for the LRU list
  policy.accessed(17);
  CHECK(policy.heap_entries() == kFiles - 1);
  CHECK(policy.size() == kFiles);
  // Victims still come farthest first, after the file with no future.
  CHECK(policy.choose_victim(any) == FileId{17});
  policy.removed(17);
  uint64_t last = kNever;
  for (int i = 0; i < 200; ++i) {
    const auto victim = policy.choose_victim(any);
    REQUIRE(victim);
    CHECK(oracle.uses_[*victim] <= last);
    last = oracle.uses_[*victim];
    policy.removed(*victim);
  }
  CHECK(policy.size() == kFiles - 201);
}

// Random inserts, hits, removals from anywhere in the heap, futures that draw nearer unsaid
// (as the trainer moves on) and pinned files: every victim is the evictable file needed
// farthest, and the policy counts what is resident.
TEST_CASE("victims stay farthest first under random changes", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  std::mt19937 rng(11);
  std::set<FileId> resident;
  uint64_t next_key = 1 << 30;  // keys stay distinct: new ones count down, nearer ones too
  const auto pick = [&] { return any_of(resident, rng); };
  for (int step = 0; step < 20000; ++step) {
    const unsigned op = rng() % 5;
    if (op == 0 || resident.size() < 10) {
      const FileId id = rng() % 2000;
      if (resident.insert(id).second) {
        oracle.uses_[id] = next_key--;
        policy.inserted(id);
      }
    } else if (op == 1) {
      const FileId id = pick();  // a hit: its next use moves on, maybe farther
      oracle.uses_[id] = (1 << 30) + rng() % (1 << 20) * 4096 + id;
      policy.accessed(id);
    } else if (op == 2) {
      const FileId id = pick();
      resident.erase(id);
      policy.removed(id);
    } else if (op == 3) {
      oracle.uses_[pick()] = next_key--;  // needed sooner, not told
    } else {
      std::set<FileId> pinned;
      for (int i = 0; i < 3; ++i) {
        pinned.insert(pick());
      }
      std::optional<FileId> want;
      for (FileId id : resident) {
        if (pinned.count(id) == 0 && (!want || oracle.uses_[id] > oracle.uses_[*want])) {
          want = id;
        }
      }
      CHECK(policy.choose_victim([&](FileId id) { return pinned.count(id) == 0; }) == want);
    }
    REQUIRE(policy.size() == resident.size());
    REQUIRE(policy.heap_entries() == resident.size());
  }
}

// Files losing and gaining a future (each change told by a hit), inserted either way, removed
// and pinned: an id's heap position and its place in the no-future list share one word, so
// every move between the two must leave both right. The victim is the evictable file with no
// future keyed longest ago, else the one needed farthest.
TEST_CASE("files moving between the heap and the no-future list stay in order", "[next_use]") {
  MapOracle oracle;
  NextUsePolicy policy(oracle);
  std::mt19937 rng(5);
  std::set<FileId> resident;
  std::list<FileId> never;  // no future, most recently keyed first
  const auto key = [&](FileId id) {
    never.remove(id);
    if (rng() % 3 == 0) {
      oracle.uses_.erase(id);
      never.push_front(id);
    } else {
      oracle.uses_[id] = uint64_t{rng() % 1000000} << 12 | id;  // distinct
    }
  };
  const auto pick = [&] { return any_of(resident, rng); };
  for (int step = 0; step < 20000; ++step) {
    const unsigned op = rng() % 4;
    if (op == 0 || resident.size() < 10) {
      const FileId id = rng() % 2000;
      if (resident.insert(id).second) {
        key(id);
        policy.inserted(id);
      }
    } else if (op == 1) {
      const FileId id = pick();
      key(id);
      policy.accessed(id);
    } else if (op == 2) {
      const FileId id = pick();
      resident.erase(id);
      never.remove(id);
      oracle.uses_.erase(id);
      policy.removed(id);
    } else {
      std::set<FileId> pinned{pick(), pick(), pick()};
      std::optional<FileId> want;
      for (auto it = never.rbegin(); it != never.rend() && !want; ++it) {
        if (pinned.count(*it) == 0) {
          want = *it;
        }
      }
      if (!want) {
        for (FileId id : resident) {
          const auto use = oracle.uses_.find(id);
          if (pinned.count(id) == 0 && use != oracle.uses_.end() &&
              (!want || use->second > oracle.uses_.at(*want))) {
            want = id;
          }
        }
      }
      CHECK(policy.choose_victim([&](FileId id) { return pinned.count(id) == 0; }) == want);
    }
    REQUIRE(policy.size() == resident.size());
    REQUIRE(policy.heap_entries() == resident.size() - never.size());
  }
}

}  // namespace epochfs::cachestore
