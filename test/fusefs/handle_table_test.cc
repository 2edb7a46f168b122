// HandleTable::try_add under allocation failure: the handle stays with the caller, so that
// Filesystem::open can unpin the cached copy it stands for (before, a throwing insert
// destroyed the handle and left the copy pinned, never to be evicted).
#include "fusefs/handle_table.h"

#include <cstdlib>
#include <memory>
#include <new>

#include <catch2/catch.hpp>

namespace {

// Allocations still to fail on this thread (0: none). Only this test sets it.
thread_local int failing_allocations = 0;

}  // namespace

// Every plain form of new and delete is replaced, all on malloc and free, so that memory from
// any of them is freed by its match (AddressSanitizer checks that they pair).
void* operator new(std::size_t n) {
  if (failing_allocations > 0) {
    --failing_allocations;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) {
    return p;
  }
  throw std::bad_alloc();
}

void* operator new[](std::size_t n) { return operator new(n); }

void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept {
  return operator new(n, tag);
}

void operator delete(void* p) noexcept { std::free(p); }

void operator delete(void* p, std::size_t) noexcept { std::free(p); }

void operator delete[](void* p) noexcept { std::free(p); }

void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace epochfs::fusefs {
namespace {

TEST_CASE("a handle whose insert fails stays with the caller", "[handles]") {
  HandleTable<int> table;
  for (int fail = 1; fail <= 2; ++fail) {
    INFO("failing allocations: " << fail);
    auto handle = std::make_unique<int>(42);
    failing_allocations = fail;  // the node, then the buckets of a first insert
    int* added = table.try_add(handle);
    failing_allocations = 0;
    if (added == nullptr) {
      REQUIRE(handle != nullptr);
      CHECK(*handle == 42);
      CHECK(table.size() == 0);
    }
  }
  auto handle = std::make_unique<int>(7);
  int* added = table.try_add(handle);
  REQUIRE(added != nullptr);
  CHECK(handle == nullptr);
  CHECK(*added == 7);
  CHECK(table.size() == 1);
}

}  // namespace
}  // namespace epochfs::fusefs
