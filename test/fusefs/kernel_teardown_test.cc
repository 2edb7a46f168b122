// KernelTeardown where there is nothing to wait for: no mount at the path, or a mount with no
// backing device in sysfs (tmpfs). Waiting for a real FUSE mount's teardown is the lifecycle
// mount test's part.
#include "fusefs/kernel_teardown.h"

#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "test/support/scratch_dir.h"

namespace epochfs::fusefs {

using test::ScratchDir;

TEST_CASE("KernelTeardown waits for nothing where nothing is mounted", "[teardown]") {
  ScratchDir dir{"teardown"};
  const KernelTeardown teardown(dir.path());
  CHECK(teardown.wait(std::chrono::milliseconds(10'000)) == -1);
}

TEST_CASE("KernelTeardown waits for nothing where the mount has no sysfs entry", "[teardown]") {
  ScratchDir dir{"teardown"};
  const int mounted = ::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=64k");
  INFO("mount: " << std::strerror(errno));
  REQUIRE(mounted == 0);  // the tests run as root
  const KernelTeardown teardown(dir.path());
  CHECK(::umount(dir.path().c_str()) == 0);
  CHECK(teardown.wait(std::chrono::milliseconds(10'000)) == -1);
}

}  // namespace epochfs::fusefs
