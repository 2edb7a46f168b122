// The mount table read as text: the mount on top at a path, escaped names included.
#include "cachestore/mount_info.h"

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

constexpr char kTable[] =
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:39 / /mnt/data rw,nosuid,nodev shared:20 - fuse.epochfs epochfs rw,user_id=0\n"
    "41 40 0:41 / /mnt/data rw,nosuid,nodev shared:21 - fuse.epochfs epochfs rw,user_id=0\n"
    "42 22 0:42 / /mnt/with\\040space rw shared:22 master:3 - tmpfs tmpfs rw\n";

}  // namespace

TEST_CASE("mount_in finds the mount on top at a path", "[mount_info]") {
  const auto top = mount_in(kTable, "/mnt/data");
  REQUIRE(top.has_value());
  CHECK(top->devno == "0:41");
  CHECK(top->type == "fuse.epochfs");
  const auto spaced = mount_in(kTable, "/mnt/with space");
  REQUIRE(spaced.has_value());
  CHECK(spaced->devno == "0:42");
  CHECK(spaced->type == "tmpfs");
  CHECK(mount_in(kTable, "/")->type == "ext4");
  CHECK_FALSE(mount_in(kTable, "/mnt").has_value());
  CHECK_FALSE(mount_in("", "/mnt/data").has_value());
}

}  // namespace epochfs::cachestore
