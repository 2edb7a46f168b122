// KernelTeardown: the kernel's part of an unmount, which the daemon lets finish before it
// removes its cache.
//
// The kernel ends the connection first (the daemon's loop returns), then evicts every inode
// the mount holds; umount2, and `epochfs unmount`, return only after that. A cache of a
// million copies unlinked meanwhile, on the same cores, made that take about twice as long
// (docs/benchmarks.md). The mount's backing device leaves sysfs
// (/sys/class/bdi/<major>:<minor>) as the kernel finishes, within a millisecond of umount2's
// return: the daemon waits for that, bounded.
#pragma once

#include <chrono>
#include <string>

namespace epochfs::fusefs {

class KernelTeardown {
 public:
  // About 10 M inodes' eviction at the rate measured for 1.28 M. A mount the kernel keeps
  // alive longer (detached lazily with files open, then aborted) is waited for no longer.
  static constexpr std::chrono::seconds kMaxWait{30};

  // At mount, once mountpoint is mounted: the entry to watch; none without sysfs.
  explicit KernelTeardown(const std::string& mountpoint);

  // After the loop has returned: unless the mount is still in the mount table, on top or
  // covered (its connection aborted, not unmounted), waits until the kernel is done with it, at
  // most max_wait. The seconds waited, or -1 if there was nothing to wait for.
  double wait(std::chrono::milliseconds max_wait = kMaxWait) const;

  // The mount's device ("major:minor") as the mount table gave it at mount; empty if none.
  const std::string& devno() const { return devno_; }

 private:
  std::string devno_;
  std::string bdi_;  // the sysfs entry; empty: nothing to watch
};

}  // namespace epochfs::fusefs
