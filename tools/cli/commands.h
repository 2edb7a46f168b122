// The `epochfs` subcommands. Each returns the process exit code and prints its own errors
// as one line on stderr. The lab's (bench, demo) are in tools/lab/commands.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusefs/mount_options.h"

namespace epochfs::tools {

int cmd_mount(fusefs::MountOptions options);

// Unmounts; unless lazy, waits for the daemon to exit, so its cache directory is gone when
// this returns.
int cmd_unmount(const std::string& mountpoint, bool lazy);

// `epochfs stats`: a summary a person reads; with all, every counter as a table; with json,
// the document as the daemon wrote it.
int cmd_stats(const std::string& mountpoint, bool json, bool all);

struct DoctorOptions {
  std::string path;  // a mount, or a source directory to be mounted; may be empty
  std::string fuse_device = "/dev/fuse";
  std::string cache_dir;          // empty: the mount's, or epochfs mount's default
  uint64_t cache_size_bytes = 0;  // 0: not given
  double cache_reserve_percent = 5;
  bool no_cache = false;
};

// `epochfs doctor`: checks the FUSE device, privileges, kernel, open-files limit, the source's
// latency or a mount's health, and the cache disk; one line each with what to fix. Exits 1 if
// any check found a problem (tools/cli/cmd_doctor.cc).
int cmd_doctor(const DoctorOptions& options);

struct CleanOptions {
  std::string cache_dir;
  bool dry_run = false;
};

// `epochfs clean`: lists the directories dead mounts left under cache_dir, with their sizes,
// and removes them unless dry_run; one line each and a total. Never a live mount's directory,
// never anything that is not epochfs's. Exits 1 only if one could not be removed
// (tools/cli/cmd_clean.cc).
int cmd_clean(const CleanOptions& options);

// `epochfs stats MOUNT --watch`: a live view refreshed every interval_s, count times (0: until
// interrupted); redrawn on a terminal, plain lines elsewhere (tools/cli/cmd_watch.cc).
int cmd_watch(const std::string& mountpoint, unsigned count, double interval_s);

// Checks every cached copy against the hash recorded when it was made; damaged copies are
// dropped by the daemon.
int cmd_verify(const std::string& mountpoint);

struct PublishOptions {
  std::string mountpoint;
  std::string file;
  std::optional<uint64_t> epoch;
  std::string stream;
  bool manifest = false;
  bool strict = false;  // most entries looked up missing: exit 1, not only a warning
};

// Publishes a shuffle file (or with manifest, the manifest) to a mount; prints the daemon's
// verdict. Fails if the order was refused.
int cmd_publish(const PublishOptions& options);

}  // namespace epochfs::tools
