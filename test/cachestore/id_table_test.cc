#include "cachestore/id_table.h"

#include <map>
#include <random>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {

namespace {

struct Value {
  uint64_t a = 0;
  uint32_t b = 0;
};

}  // namespace

TEST_CASE("an id table holds what a map would, through inserts and erasures", "[id_table]") {
  IdTable<Value> table;
  std::map<uint32_t, uint64_t> reference;
  std::mt19937 random(11);
  for (int step = 0; step < 200000; ++step) {
    const uint32_t id = random() % 5000;
    if (reference.count(id) != 0) {
      REQUIRE(table.find(id) != nullptr);
      REQUIRE(table.find(id)->a == reference[id]);
      table.erase(id);
      reference.erase(id);
    } else {
      REQUIRE(table.find(id) == nullptr);
      table.insert(id, Value{uint64_t{id} * 3 + static_cast<uint64_t>(step), 0});
      reference[id] = uint64_t{id} * 3 + static_cast<uint64_t>(step);
    }
  }
  REQUIRE(table.size() == reference.size());
  std::map<uint32_t, uint64_t> seen;
  table.for_each([&](uint32_t id, const Value& v) { seen[id] = v.a; });
  CHECK(seen == reference);
  table.erase(999999);  // never given a value: nothing happens
  CHECK(table.size() == reference.size());
}

TEST_CASE("an id table's values stay put while others come and go", "[id_table]") {
  IdTable<Value> table;
  Value* first = &table.insert(3, Value{42, 7});
  for (uint32_t id = 4; id < 10000; ++id) {
    table.insert(id, Value{id, 0});
  }
  for (uint32_t id = 4; id < 10000; id += 2) {
    table.erase(id);
  }
  CHECK(table.find(3) == first);
  CHECK(first->a == 42);
  // for_each may erase the id it is given.
  table.for_each([&](uint32_t id, Value&) {
    if (id % 3 == 0) {
      table.erase(id);
    }
  });
  CHECK(table.find(3) == nullptr);
  CHECK(table.find(5) != nullptr);
}

TEST_CASE("an id table costs its values and a few bytes per id", "[id_table]") {
  IdTable<Value> table;
  constexpr uint32_t kIds = 1000000;
  for (uint32_t id = 0; id < kIds; ++id) {
    table.insert(id, Value{id, 0});
  }
  // A value and its id's slot number, grown a quarter at a time, and a bit for its slot.
  CHECK(table.bytes() < kIds * (sizeof(Value) + 5 * sizeof(uint32_t) / 4 + 1));
  for (uint32_t id = 0; id < kIds; ++id) {
    table.erase(id);
  }
  const size_t held = table.bytes();
  for (uint32_t id = 0; id < kIds; ++id) {
    table.insert(id, Value{id, 0});
  }
  CHECK(table.bytes() == held);  // freed slots serve again
}

}  // namespace epochfs::cachestore
