// FUSE over io_uring (--fuse-transport uring, fusefs/uring_transport.h) on real mounts: where
// the kernel offers it every request but forgets and interrupts comes through the ring, files
// read byte for byte, orders publish, and the unmount is clean; where it does not (the fuse
// module's enable_uring off, or a kernel before 6.14) the mount serves by /dev/fuse and says
// why, as it does where io_uring itself is refused. The kernel settings are global: one test
// case sets them for every section, and puts them back.
#include <fstream>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::test {
namespace {

constexpr char kEnableUring[] = "/sys/module/fuse/parameters/enable_uring";

constexpr char kIoUringDisabled[] = "/proc/sys/kernel/io_uring_disabled";

// A kernel setting (a module parameter, a sysctl) set for the test's life and put back after.
class KernelSetting {
 public:
  // Whether path exists on this kernel.
  static bool exists(const char* path) { return std::ifstream(path).good(); }

  KernelSetting(const char* path, const std::string& value) : path_(path), old_(read()) {
    write(value);
  }

  ~KernelSetting() { write(old_); }

  KernelSetting(const KernelSetting&) = delete;
  KernelSetting& operator=(const KernelSetting&) = delete;

 private:
  std::string read() const {
    std::string value;
    std::ifstream(path_) >> value;
    return value;
  }

  void write(const std::string& value) const { std::ofstream(path_) << value << "\n"; }

  const char* path_;
  const std::string old_;
};

std::string stat_text(const Mount& mount, const std::string& key) {
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  return doc->values[key];
}

const std::vector<std::string> kUring = {"--fuse-transport", "uring"};

}  // namespace

TEST_CASE("over io_uring requests come by the ring where the kernel offers it, else by the device",
          "[mount][uring]") {
  TempDir dir;
  write_files(dir / "src", 20, 110000);
  SECTION("offered: the ring serves reads, opens and an order's writes") {
    if (!KernelSetting::exists(kEnableUring)) {
      WARN("SKIPPED: this kernel has no FUSE over io_uring (Linux 6.14 or later)");
      return;
    }
    KernelSetting on(kEnableUring, "Y");
    Mount mount(dir / "src", dir / "mnt", kUring);
    REQUIRE(stat_text(mount, "data_path.transport") == "io_uring");
    check_files(dir / "src", mount.path(), 20);
    REQUIRE(publish(mount, "f3\nf2\nf1\n") == 0);
    wait_for_staging(mount);
    check_files(dir / "src", mount.path(), 20);
    CHECK(stat_of(mount, "opens") == 40);
    // Every open, read and release, the stats' own opens and the order's write and flush.
    CHECK(stat_of(mount, "data_path.ring_requests") >= 120);
    CHECK(stat_text(mount, "data_path.device_because").empty());
  }
  SECTION("not offered: the device serves, and the stats say why") {
    std::optional<KernelSetting> off;
    if (KernelSetting::exists(kEnableUring)) {
      off.emplace(kEnableUring, "N");
    }
    Mount mount(dir / "src", dir / "mnt", kUring);
    check_files(dir / "src", mount.path(), 20);
    CHECK(stat_text(mount, "data_path.transport") == "device");
    CHECK_THAT(stat_text(mount, "data_path.device_because"),
               Catch::Contains("the kernel does not offer it"));
    CHECK(stat_of(mount, "data_path.ring_requests") == 0);
  }
  SECTION("offered, but this process may not make rings: the device serves, no hang") {
    if (!KernelSetting::exists(kEnableUring) || !KernelSetting::exists(kIoUringDisabled)) {
      WARN("SKIPPED: this kernel has no FUSE over io_uring or no io_uring_disabled sysctl");
      return;
    }
    KernelSetting on(kEnableUring, "Y");
    KernelSetting no_rings(kIoUringDisabled, "2");
    Mount mount(dir / "src", dir / "mnt", kUring);
    check_files(dir / "src", mount.path(), 20);
    CHECK(stat_text(mount, "data_path.transport") == "device");
    CHECK_THAT(stat_text(mount, "data_path.device_because"), Catch::Contains("io_uring refused"));
  }
}

}  // namespace epochfs::test
