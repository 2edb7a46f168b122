#include "prefetch/rights_checked.h"

#include <catch2/catch.hpp>

#include "prefetch/credentials.h"

namespace epochfs::prefetch {

TEST_CASE("rights are fingerprinted by user, group and supplementary groups", "[rights]") {
  const Credentials alice{1000, 1000, {1000, 27}};
  Credentials other_group = alice;
  other_group.gid = 27;  // newgrp
  Credentials fewer_groups = alice;
  fewer_groups.groups = {1000};
  const Credentials bob{1001, 1000, {1000, 27}};
  CHECK(alice.fingerprint() != 0);
  CHECK(alice.fingerprint() == Credentials{1000, 1000, {1000, 27}}.fingerprint());
  CHECK(alice.fingerprint() != other_group.fingerprint());
  CHECK(alice.fingerprint() != fewer_groups.fingerprint());
  CHECK(alice.fingerprint() != bob.fingerprint());
}

TEST_CASE("a right confirmed for one set of rights is not one for another", "[rights]") {
  RightsChecked checked(64);
  const Credentials alice{1000, 1000, {1000, 27}};
  Credentials in_group = alice;
  in_group.gid = 27;
  checked.confirm(5, alice.fingerprint());
  CHECK(checked.confirmed(5, alice.fingerprint()));
  CHECK_FALSE(checked.confirmed(5, in_group.fingerprint()));
  CHECK_FALSE(checked.confirmed(6, alice.fingerprint()));
  // File 69 takes file 5's slot (64 slots): 5 is checked again.
  checked.confirm(69, alice.fingerprint());
  CHECK(checked.confirmed(69, alice.fingerprint()));
  CHECK_FALSE(checked.confirmed(5, alice.fingerprint()));
}

}  // namespace epochfs::prefetch
