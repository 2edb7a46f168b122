#include "prefetch/file_registry.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include <rapidcheck/catch.h>

namespace epochfs::prefetch {

TEST_CASE("the registry hands out dense ids, one per path", "[registry]") {
  FileRegistry r;
  CHECK(r.id_of("a/b") == 0);
  CHECK(r.id_of("a/c") == 1);
  CHECK(r.id_of("a/b") == 0);
  CHECK(r.path_of(1) == "a/c");
  CHECK(r.path_of(7).empty());
  CHECK(r.size() == 2);
}

TEST_CASE("the registry finds every path again after its index grew", "[registry]") {
  FileRegistry r;
  constexpr uint32_t kFiles = 200000;
  for (uint32_t i = 0; i < kFiles; ++i) {
    REQUIRE(r.id_of("n" + std::to_string(i % 1000) + "/f" + std::to_string(i)) == i);
  }
  for (uint32_t i = 0; i < kFiles; i += 7) {
    const std::string path = "n" + std::to_string(i % 1000) + "/f" + std::to_string(i);
    REQUIRE(r.id_of(path) == i);
    REQUIRE(r.path_of(i) == path);
  }
  CHECK(r.size() == kFiles);
}

// Every open looks its path up under the registry's lock: one index of 16 M paths stalled
// them for ~1 s while it grew. Its tables grow one at a time, each a small share of the paths.
TEST_CASE("no growth of the registry's index rehashes more than a share of it", "[registry]") {
  FileRegistry r;
  constexpr uint32_t kFiles = 500000;
  for (uint32_t i = 0; i < kFiles; ++i) {
    r.id_of("n" + std::to_string(i % 1000) + "/f" + std::to_string(i));
  }
  CHECK(r.most_rehashed_at_once() > 0);
  CHECK(r.most_rehashed_at_once() <= kFiles / 100);
  CHECK(r.find("n7/f7") == 7u);
  CHECK(r.find("n7/f8") == std::nullopt);
}

TEST_CASE("paths of any length are kept whole", "[registry]") {
  FileRegistry r;
  const std::string longer(3 << 20, 'x');  // longer than an arena chunk
  const FileId a = r.id_of("short");
  const FileId b = r.id_of(longer);
  CHECK(r.path_of(b) == longer);
  CHECK(r.id_of(longer) == b);
  CHECK(r.id_of("short") == a);
  CHECK(r.path_of(r.id_of("after")) == "after");
}

TEST_CASE("the last observed attributes are kept, however old", "[registry]") {
  FileRegistry r;
  const FileId a = r.id_of("a");
  const FileId b = r.id_of("b");
  CHECK_FALSE(r.last_observed(a).has_value());
  struct stat st = {};
  st.st_mode = S_IFREG | 0640;
  st.st_uid = 1000;
  st.st_gid = 100;
  st.st_nlink = 1;
  st.st_size = 123;
  st.st_ino = 77;
  st.st_mtim = {1700000000, 5};
  st.st_ctim = {1700000001, 6};
  r.observe(a, st);
  st.st_size = 456;  // same shape: shared, not stored twice
  r.observe(b, st);
  auto got = r.last_observed(a);
  REQUIRE(got.has_value());
  CHECK(got->st_mode == (S_IFREG | 0640));
  CHECK(got->st_uid == 1000);
  CHECK(got->st_gid == 100);
  CHECK(got->st_size == 123);
  CHECK(got->st_ino == 77);
  CHECK(got->st_mtim.tv_sec == 1700000000);
  CHECK(got->st_mtim.tv_nsec == 5);
  CHECK(got->st_ctim.tv_nsec == 6);
  CHECK(r.last_observed(b)->st_size == 456);
}

TEST_CASE("a released path is forgotten, and its id handed out again once recycled", "[registry]") {
  FileRegistry r;
  const FileId a = r.id_of("a");
  const FileId b = r.id_of("b");
  r.release(a);
  CHECK(r.find("a") == std::nullopt);
  CHECK(r.path_of(a).empty());
  CHECK(r.size() == 1);
  CHECK(r.find("b") == b);
  // Not recycled yet: a new path gets a new id, and "a" again is a new path.
  const FileId c = r.id_of("c");
  CHECK(c != a);
  const FileId a2 = r.id_of("a");
  CHECK(a2 != a);
  r.release(c);
  r.recycle(c);
  r.recycle(c);  // twice is once
  r.recycle(b);  // not released: no effect
  CHECK(r.id_of("d") == c);
  CHECK(r.path_of(c) == "d");
  CHECK(r.id_of("e") != c);
  CHECK(r.find("b") == b);
}

TEST_CASE("a path only an order named can be released, one anything else used cannot",
          "[registry]") {
  FileRegistry r;
  const FileId order_only = r.order_id_of("named/by/order");
  const FileId looked_up = r.order_id_of("then/looked/up");
  CHECK(r.id_of("then/looked/up") == looked_up);  // the same id, pinned now
  const FileId used = r.id_of("used");
  CHECK(r.order_id_of("used") == used);  // an order naming it later does not unpin it
  CHECK_FALSE(r.pinned(order_only));
  CHECK(r.pinned(looked_up));
  CHECK(r.release_unpinned(looked_up) == std::nullopt);
  CHECK(r.release_unpinned(used) == std::nullopt);
  CHECK(r.release_unpinned(order_only) == std::string("named/by/order").size());
  CHECK(r.release_unpinned(order_only) == std::nullopt);  // once
  CHECK(r.find("named/by/order") == std::nullopt);
  CHECK(r.find("then/looked/up") == looked_up);
  // Recycled, the id comes back unpinned or pinned as its new path is registered.
  r.recycle(order_only);
  CHECK(r.id_of("new") == order_only);
  CHECK(r.pinned(order_only));
}

TEST_CASE("released paths give their arena memory back", "[registry]") {
  FileRegistry r;
  const std::string pad(200, 'p');
  const auto path = [&](int round, int i) {
    return pad + std::to_string(round) + "/" + std::to_string(i);
  };
  // Rounds of an order's worth of new paths (~10 MiB), each forgotten when its job ends but
  // for one path in 50, kept among them (its chunk's live paths move when the chunk empties).
  std::map<std::string, FileId> kept;
  std::vector<FileId> ids;
  size_t full = 0;
  for (int round = 0; round < 6; ++round) {
    for (FileId id : ids) {
      r.release(id);
      r.recycle(id);
    }
    ids.clear();
    for (int i = 0; i < 50000; ++i) {
      const FileId id = r.id_of(path(round, i));
      if (i % 50 == 0) {
        kept.emplace(path(round, i), id);
      } else {
        ids.push_back(id);
      }
    }
    full = full == 0 ? r.arena_bytes() : full;
    CHECK(r.arena_bytes() <= 2 * full + (2u << 20));
    CHECK(r.size() == 49000 + kept.size());
  }
  for (FileId id : ids) {
    r.release(id);
  }
  // What is left is twice the kept paths at most, and every one of them is found.
  CHECK(r.arena_bytes() <= 2 * kept.size() * (pad.size() + 8) + (2u << 20));
  for (const auto& [p, id] : kept) {
    REQUIRE(r.find(p) == id);
    REQUIRE(r.path_of(id) == p);
  }
}

TEST_CASE("the registry under any mix of registers, releases and recycles", "[registry]") {
  rc::prop("every live path keeps its id, every released one is gone", [] {
    const auto steps = *rc::gen::container<std::vector<std::tuple<uint8_t, uint16_t>>>(
        rc::gen::arbitrary<std::tuple<uint8_t, uint16_t>>());
    FileRegistry r;
    std::map<std::string, FileId> live;
    std::vector<FileId> released;
    size_t live_bytes = 0;
    for (const auto& [op, n] : steps) {
      // Paths of many lengths, few enough that they recur.
      const std::string path = std::string(n % 700, 'x') + std::to_string(n % 97);
      if (op % 3 != 0) {
        const FileId id = r.id_of(path);
        auto [it, added] = live.try_emplace(path, id);
        RC_ASSERT(it->second == id);
        live_bytes += added ? path.size() + 1 : 0;
      } else if (op % 2 == 0 && !live.empty()) {
        auto it = std::next(live.begin(), n % live.size());
        r.release(it->second);
        released.push_back(it->second);
        live_bytes -= it->first.size() + 1;
        live.erase(it);
      } else if (!released.empty()) {
        r.recycle(released[n % released.size()]);
      }
    }
    for (const auto& [path, id] : live) {
      RC_ASSERT(r.find(path) == id);
      RC_ASSERT(r.path_of(id) == path);
    }
    // A released id not handed out again names no path.
    std::set<FileId> ids_live;
    for (const auto& [path, id] : live) {
      ids_live.insert(id);
    }
    for (FileId id : released) {
      if (!ids_live.contains(id)) {
        RC_ASSERT(r.path_of(id).empty());
      }
    }
    RC_ASSERT(r.size() == live.size());
    RC_ASSERT(r.arena_bytes() <= 2 * live_bytes + (2u << 20));
  });
}

}  // namespace epochfs::prefetch
