// KernelTeardown where there is nothing to wait for: no mount at the path, or a mount with no
// backing device in sysfs (tmpfs). Waiting for a real FUSE mount's teardown is the lifecycle
// mount test's part.
#include "fusefs/kernel_teardown.h"

#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

namespace epochfs::fusefs {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with what is left in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string name = (fs::temp_directory_path() / "teardown.XXXXXX").string();
    path_ = ::mkdtemp(name.data()) != nullptr ? name : "";
  }

  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }

  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("KernelTeardown waits for nothing where nothing is mounted", "[teardown]") {
  ScratchDir dir;
  REQUIRE_FALSE(dir.path().empty());
  const KernelTeardown teardown(dir.path());
  CHECK(teardown.wait(std::chrono::milliseconds(10'000)) == -1);
}

TEST_CASE("KernelTeardown waits for nothing where the mount has no sysfs entry", "[teardown]") {
  ScratchDir dir;
  REQUIRE_FALSE(dir.path().empty());
  const int mounted = ::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=64k");
  INFO("mount: " << std::strerror(errno));
  REQUIRE(mounted == 0);  // the tests run as root
  const KernelTeardown teardown(dir.path());
  CHECK(::umount(dir.path().c_str()) == 0);
  CHECK(teardown.wait(std::chrono::milliseconds(10'000)) == -1);
}

}  // namespace epochfs::fusefs
