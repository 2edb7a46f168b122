// UserLedger (prefetch/user_ledger.h): what each user holds against their limit and the
// mount's cap; a refusal names the limit and charges nothing.
#include "prefetch/user_ledger.h"

#include <errno.h>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("a user is refused past their own limit, others are not held back", "[ledger]") {
  UserLedger ledger("bytes", "--per-user", 100, "--all", 250);
  REQUIRE(ledger.charge(1000, 60).is_ok());
  auto refused = ledger.charge(1000, 41);
  CHECK(refused.error_code() == EDQUOT);
  CHECK_THAT(refused.context(), Catch::Contains("(--per-user 100)") &&
                                    Catch::Contains("user 1000 would hold 101 bytes"));
  CHECK(ledger.held(1000) == 60);  // a refusal charges nothing
  CHECK(ledger.charge(1001, 100).is_ok());
  CHECK(ledger.refused() == 1);
}

TEST_CASE("the mount's cap holds against many users within their limits", "[ledger]") {
  UserLedger ledger("bytes", "--per-user", 100, "--all", 250);
  REQUIRE(ledger.charge(1, 100).is_ok());
  REQUIRE(ledger.charge(2, 100).is_ok());
  auto refused = ledger.charge(3, 51);
  CHECK(refused.error_code() == EDQUOT);
  CHECK_THAT(refused.context(), Catch::Contains("(--all 250)"));
  CHECK(ledger.charge(3, 50).is_ok());
  CHECK(ledger.total() == 250);
}

TEST_CASE("what is given back can be charged again, and no more than was held", "[ledger]") {
  UserLedger ledger("bytes", "--per-user", 100, "--all", 250);
  REQUIRE(ledger.charge(7, 100).is_ok());
  ledger.release(7, 30);
  CHECK(ledger.held(7) == 70);
  CHECK(ledger.charge(7, 30).is_ok());
  ledger.release(7, 1000);  // more than held: all of it, not below zero
  CHECK(ledger.held(7) == 0);
  CHECK(ledger.total() == 0);
  ledger.release(8, 5);  // nothing held: nothing changes
  CHECK(ledger.total() == 0);
}

}  // namespace
}  // namespace epochfs::prefetch
