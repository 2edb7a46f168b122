#include "prefetch/grace.h"

#include <optional>
#include <utility>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("an epoch is passed twice only when every ticket taken before it is given back",
          "[grace]") {
  Grace grace;
  const uint64_t start = grace.epoch();
  CHECK(grace.advance() == start + 1);                     // nothing held
  std::optional<Grace::Ticket> old(std::in_place, grace);  // taken in start + 1
  CHECK(grace.advance() == start + 2);  // tickets of start + 1 may still be held here ...
  CHECK(grace.advance() == start + 2);  // ... so not past it while one is
  CHECK(grace.advance() == start + 2);
  {
    Grace::Ticket newer(grace);  // taken later: does not hold back what is older
    old.reset();
    CHECK(grace.advance() == start + 3);
    CHECK(grace.advance() == start + 3);  // newer, of start + 2, is held
  }
  CHECK(grace.advance() == start + 4);
}

TEST_CASE("a ticket moved along keeps holding its epoch, once", "[grace]") {
  Grace grace;
  Grace::Ticket moved;
  {
    Grace::Ticket first(grace);
    moved = std::move(first);
  }  // first, moved from, gives nothing back
  const uint64_t e = grace.advance();
  CHECK(grace.advance() == e);
  moved = Grace::Ticket();  // given back once
  CHECK(grace.advance() == e + 1);
  CHECK(grace.advance() == e + 2);
}

}  // namespace
}  // namespace epochfs::prefetch
