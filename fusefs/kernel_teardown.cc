#include "fusefs/kernel_teardown.h"

#include <unistd.h>

#include <thread>

#include "cachestore/mount_info.h"

namespace epochfs::fusefs {

KernelTeardown::KernelTeardown(const std::string& mountpoint) {
  const auto entry = cachestore::mount_at(mountpoint);
  if (!entry) {
    return;
  }
  devno_ = entry->devno;
  const std::string bdi = "/sys/class/bdi/" + devno_;
  if (::access(bdi.c_str(), F_OK) == 0) {
    bdi_ = bdi;
  }
}

double KernelTeardown::wait(std::chrono::milliseconds max_wait) const {
  if (bdi_.empty()) {
    return -1;
  }
  if (cachestore::device_mounted(devno_)) {
    return -1;  // still mounted, maybe under another mount: nothing is torn down yet
  }
  const auto start = std::chrono::steady_clock::now();
  const auto waited = [&] { return std::chrono::steady_clock::now() - start; };
  while (::access(bdi_.c_str(), F_OK) == 0 && waited() < max_wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::chrono::duration<double>(waited()).count();
}

}  // namespace epochfs::fusefs
