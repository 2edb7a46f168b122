// KernelReadahead: how far the kernel reads ahead of a reader in the mount's files
// (`--read-ahead`).
//
// The kernel's default window is 128 KiB. A reader of a memory-mapped dataset (numpy's memmap,
// LMDB) faults a page at a time, and each fault brings in one window by a READ: a larger window
// takes fewer READs, and a file larger than the cache reads faster (docs/benchmarks.md,
// "Single-file datasets"). Not the default: a larger window also reads further past a large
// sample read with read(), into blocks no order names, each then a block miss.
//
// The window is the mount's backing device's read_ahead_kb in sysfs (root only). The kernel sets
// it at INIT's reply to the smaller of its own and the reply's, so it can only be raised after
// that: on the first request served, which the kernel sends only once INIT is done.
#pragma once

#include <string>

namespace epochfs::fusefs {

class KernelReadahead {
 public:
  // devno: the mount's device ("major:minor", KernelTeardown::devno); kb 0 leaves the kernel's
  // window, as does an empty devno.
  KernelReadahead(const std::string& devno, unsigned kb);

  // Writes the window; logs what came of it. Once, after INIT.
  void set() const;

 private:
  std::string path_;  // the sysfs file; empty: nothing to do
  unsigned kb_;
};

}  // namespace epochfs::fusefs
