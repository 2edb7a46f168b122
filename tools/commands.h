// The `epochfs` subcommands. Each returns the process exit code and prints its own errors
// as one line on stderr.
#pragma once

#include <string>
#include <vector>

#include "fusefs/mount_options.h"

namespace epochfs::tools {

int cmd_mount(fusefs::MountOptions options);

// Unmounts; unless lazy, waits for the daemon to exit, so its cache directory is gone when
// this returns.
int cmd_unmount(const std::string& mountpoint, bool lazy);

int cmd_stats(const std::string& mountpoint, bool json);

// Checks every cached copy against the hash recorded when it was made; damaged copies are
// dropped by the daemon.
int cmd_verify(const std::string& mountpoint);

struct DemoOptions {
  std::string dir;  // work dir; a fresh temporary one if empty
  size_t files = 10000;
  std::vector<unsigned> threads = {1, 8};
  unsigned rounds = 3;
  bool immutable = true;
  bool keep = false;
  // Drop the page cache before every pass (needs root): reads reach the daemon and the disk.
  bool cold = false;
  // Mount with --no-cache: the overlay alone.
  bool no_cache = false;
  // Extra `epochfs mount` arguments, to compare configurations.
  std::vector<std::string> mount_args;
};

int cmd_demo(const DemoOptions& options);

}  // namespace epochfs::tools
