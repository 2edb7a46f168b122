#include "cachestore/id_index.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

// Keys whose hashes take 14 values, so that probes run long and deletions shift entries back
// across each other: 7 homes spread over the table, 7 at its very end, whose probes wrap round.
uint64_t crowded_hash(uint64_t key) {
  return key % 2 == 0 ? (key % 7) << 29 : UINT32_MAX - key % 7;
}

}  // namespace

TEST_CASE("an id index finds what was filed, also after erasures amid collisions", "[id_index]") {
  IdIndex index;
  std::unordered_map<uint32_t, uint64_t> key_of;  // what the index's owner keeps
  std::unordered_map<uint64_t, uint32_t> id_of;   // the reference
  std::mt19937_64 random(7);
  const auto find = [&](uint64_t key) {
    return index.find(crowded_hash(key), [&](uint32_t id) { return key_of.at(id) == key; });
  };
  for (uint32_t step = 0; step < 200000; ++step) {
    const uint64_t key = random() % 3000;
    const auto known = id_of.find(key);
    REQUIRE(find(key) == (known == id_of.end() ? IdIndex::kNone : known->second));
    if (known == id_of.end()) {
      key_of[step] = key;
      id_of[key] = step;
      index.insert(step, crowded_hash(key));
    } else if (random() % 2 == 0) {
      REQUIRE(index.erase(known->second, crowded_hash(key)));
      REQUIRE_FALSE(index.erase(known->second, crowded_hash(key)));
      key_of.erase(known->second);
      id_of.erase(known);
    }
    REQUIRE(index.size() == id_of.size());
  }
  for (const auto& [key, id] : id_of) {
    CHECK(find(key) == id);
  }
}

TEST_CASE("an id index shrinks to what it holds and keeps finding it", "[id_index]") {
  IdIndex index;
  for (uint32_t id = 0; id < 100000; ++id) {
    index.insert(id, uint64_t{id} * 0x9e3779b97f4a7c15ULL);
  }
  const size_t full = index.bytes();
  for (uint32_t id = 0; id < 99000; ++id) {
    REQUIRE(index.erase(id, uint64_t{id} * 0x9e3779b97f4a7c15ULL));
  }
  index.shrink();
  CHECK(index.bytes() * 50 < full);
  for (uint32_t id = 99000; id < 100000; ++id) {
    CHECK(index.find(uint64_t{id} * 0x9e3779b97f4a7c15ULL,
                     [id](uint32_t found) { return found == id; }) == id);
  }
}

TEST_CASE("an id index grows by half: more than 46% full past its first table", "[id_index]") {
  IdIndex index;
  size_t least = SIZE_MAX;  // the smallest fill seen, in ids per 1,000 slots
  for (uint32_t id = 0; id < 300000; ++id) {
    index.insert(id, uint64_t{id} * 0x9e3779b97f4a7c15ULL);
    if (id >= 64) {
      least = std::min(least, 1000 * index.size() / (index.bytes() / 8));
    }
  }
  CHECK(least > 460);
  CHECK(index.find(uint64_t{123456} * 0x9e3779b97f4a7c15ULL,
                   [](uint32_t found) { return found == 123456; }) == 123456);
}

}  // namespace epochfs::cachestore
