#include "cachestore/eviction_policy.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

bool any(FileId /*id*/) { return true; }

// The victim LruPolicy picks when nothing is refused.
std::optional<FileId> oldest(LruPolicy& p) { return p.choose_victim(any); }

// The brute-force reference: every resident id with the tick of its last insert or hit. The
// victim is the acceptable id with the smallest tick, found by scanning them all.
class LruModel {
 public:
  void inserted(FileId id, uint64_t tick) {
    for (auto& e : entries_) {
      if (e.id == id) {
        e.tick = tick;
        return;
      }
    }
    entries_.push_back(Entry{id, tick});
  }

  void accessed(FileId id, uint64_t tick) {
    for (auto& e : entries_) {
      if (e.id == id) {
        e.tick = tick;
      }
    }
  }

  void removed(FileId id) {
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                  [id](const Entry& e) { return e.id == id; }),
                   entries_.end());
  }

  bool resident(FileId id) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [id](const Entry& e) { return e.id == id; });
  }

  std::optional<FileId> victim(const std::set<FileId>& refused) const {
    std::optional<Entry> best;
    for (const auto& e : entries_) {
      if (refused.count(e.id) == 0 && (!best || e.tick < best->tick)) {
        best = e;
      }
    }
    return best ? std::optional<FileId>(best->id) : std::nullopt;
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    FileId id;
    uint64_t tick;
  };

  std::vector<Entry> entries_;
};

}  // namespace

TEST_CASE("LruPolicy evicts the file whose last insert or hit is oldest", "[eviction_policy]") {
  LruPolicy p;
  CHECK(p.size() == 0);
  p.inserted(1);
  p.inserted(2);
  p.inserted(3);
  CHECK(p.size() == 3);
  CHECK(oldest(p) == FileId{1});
  // choose_victim only names the victim; the store reports the removal separately.
  CHECK(p.size() == 3);
  CHECK(oldest(p) == FileId{1});

  p.accessed(1);  // order, oldest first: 2 3 1
  CHECK(oldest(p) == FileId{2});
  p.inserted(2);  // a re-insert counts as a use and does not duplicate: 3 1 2
  CHECK(p.size() == 3);
  CHECK(oldest(p) == FileId{3});
  p.accessed(3);  // 1 2 3
  CHECK(oldest(p) == FileId{1});
  p.accessed(1);
  p.accessed(2);  // 3 1 2
  CHECK(oldest(p) == FileId{3});
}

TEST_CASE("LruPolicy forgets removed files", "[eviction_policy]") {
  LruPolicy p;
  p.inserted(10);
  p.inserted(20);
  p.inserted(30);
  p.removed(10);
  CHECK(p.size() == 2);
  CHECK(oldest(p) == FileId{20});
  // A removed file is never offered to can_evict again.
  std::vector<FileId> offered;
  CHECK_FALSE(p.choose_victim([&](FileId id) {
                 offered.push_back(id);
                 return false;
               }).has_value());
  CHECK(std::find(offered.begin(), offered.end(), FileId{10}) == offered.end());
  CHECK(offered.size() == 2);
  // A hit on a removed file does not bring it back.
  p.accessed(10);
  CHECK(p.size() == 2);
  // Removing an unknown or already removed id is a no-op.
  p.removed(10);
  p.removed(99);
  CHECK(p.size() == 2);
  // A removed file inserted again is the newest.
  p.inserted(10);
  CHECK(p.size() == 3);
  p.removed(20);
  CHECK(oldest(p) == FileId{30});
  p.removed(30);
  CHECK(oldest(p) == FileId{10});
  p.removed(10);
  CHECK(p.size() == 0);
  CHECK_FALSE(oldest(p).has_value());
}

TEST_CASE("LruPolicy skips files can_evict refuses", "[eviction_policy]") {
  LruPolicy p;
  CHECK_FALSE(oldest(p).has_value());  // nothing resident
  for (FileId id = 1; id <= 5; ++id) {
    p.inserted(id);
  }
  const std::set<FileId> pinned = {1, 2, 4};
  auto unpinned = [&](FileId id) { return pinned.count(id) == 0; };
  CHECK(p.choose_victim(unpinned) == FileId{3});
  p.accessed(3);  // now 5 is the oldest unpinned
  CHECK(p.choose_victim(unpinned) == FileId{5});
  // Offered oldest first, and the search stops at the first acceptable one.
  std::vector<FileId> offered;
  CHECK(p.choose_victim([&](FileId id) {
    offered.push_back(id);
    return unpinned(id);
  }) == FileId{5});
  CHECK(offered == std::vector<FileId>{1, 2, 4, 5});
  // Nothing qualifies: nullopt, and every resident file was considered.
  offered.clear();
  CHECK_FALSE(p.choose_victim([&](FileId id) {
                 offered.push_back(id);
                 return false;
               }).has_value());
  CHECK(offered.size() == 5);
  CHECK(p.size() == 5);
}

TEST_CASE("LruPolicy ignores hits on files it does not hold", "[eviction_policy]") {
  LruPolicy p;
  p.accessed(42);
  CHECK(p.size() == 0);
  CHECK_FALSE(oldest(p).has_value());
  p.inserted(1);
  p.inserted(2);
  p.accessed(42);
  CHECK(p.size() == 2);
  CHECK(oldest(p) == FileId{1});
  CHECK(p.choose_victim([](FileId id) { return id == 42; }) == std::nullopt);
  CHECK(p.worth_evicting(42, 1));  // LRU admits everything
}

TEST_CASE("LruPolicy matches a brute-force LRU model on random traces", "[eviction_policy]") {
  constexpr FileId kIds = 50;
  constexpr int kEvents = 4000;
  for (uint32_t seed : {1u, 2u, 3u, 42u, 2024u}) {
    std::mt19937 rng(seed);
    LruPolicy policy;
    LruModel model;
    int victims_found = 0;
    int victims_none = 0;
    for (int step = 0; step < kEvents; ++step) {
      INFO("seed " << seed << ", step " << step);
      const auto tick = static_cast<uint64_t>(step);
      const FileId id = rng() % kIds;
      const uint32_t kind = rng() % 100;
      if (kind < 35) {
        policy.inserted(id);
        model.inserted(id, tick);
      } else if (kind < 65) {
        policy.accessed(id);
        model.accessed(id, tick);
      } else if (kind < 80) {
        policy.removed(id);
        model.removed(id);
      } else {
        // Refuse each id with a probability drawn per event, from none to all.
        const uint32_t refuse_percent = (rng() % 5) * 25;
        std::set<FileId> refused;
        for (FileId r = 0; r < kIds; ++r) {
          if (rng() % 100 < refuse_percent) {
            refused.insert(r);
          }
        }
        bool offered_non_resident = false;
        const auto got = policy.choose_victim([&](FileId v) {
          offered_non_resident |= !model.resident(v);
          return refused.count(v) == 0;
        });
        const auto want = model.victim(refused);
        REQUIRE_FALSE(offered_non_resident);
        REQUIRE(got == want);
        ++(got ? victims_found : victims_none);
      }
      REQUIRE(policy.size() == model.size());
    }
    // The trace exercised both outcomes of choose_victim.
    CHECK(victims_found > 0);
    CHECK(victims_none > 0);
  }
}

}  // namespace epochfs::cachestore
