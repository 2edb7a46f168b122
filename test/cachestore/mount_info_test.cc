// The mount table read as text: the mount on top at a path, escaped names included, and
// whether a device is mounted anywhere.
#include "cachestore/mount_info.h"

#include <sstream>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

constexpr char kTable[] =
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:39 / /mnt/data rw,nosuid,nodev shared:20 - fuse.epochfs epochfs rw,user_id=0\n"
    "41 40 0:41 / /mnt/data rw,nosuid,nodev shared:21 - fuse.epochfs epochfs rw,user_id=0\n"
    "42 22 0:42 / /mnt/with\\040space rw shared:22 master:3 - tmpfs tmpfs rw\n";

std::optional<MountEntry> top_at(const std::string& path, const std::string& table = kTable) {
  std::istringstream in(table);
  return mount_in(in, path);
}

bool lists(const std::string& devno) {
  std::istringstream in(kTable);
  return device_in(in, devno);
}

}  // namespace

TEST_CASE("mount_in finds the mount on top at a path", "[mount_info]") {
  const auto top = top_at("/mnt/data");
  REQUIRE(top.has_value());
  CHECK(top->devno == "0:41");
  CHECK(top->type == "fuse.epochfs");
  const auto spaced = top_at("/mnt/with space");
  REQUIRE(spaced.has_value());
  CHECK(spaced->devno == "0:42");
  CHECK(spaced->type == "tmpfs");
  CHECK(spaced->mountpoint == "/mnt/with space");
  const auto root = top_at("/");
  REQUIRE(root.has_value());
  CHECK(root->type == "ext4");
  CHECK_FALSE(top_at("/mnt").has_value());
  CHECK_FALSE(top_at("/mnt/data", "").has_value());
}

TEST_CASE("device_in finds a mount covered by another", "[mount_info]") {
  CHECK(lists("0:39"));  // under 0:41 at the same path
  CHECK(lists("0:41"));
  CHECK_FALSE(lists("0:40"));
}

}  // namespace epochfs::cachestore
