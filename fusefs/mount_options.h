// MountOptions: everything `epochfs mount` takes, as plain data (no libfuse types).
#pragma once

#include <string>
#include <vector>

#include "cachestore/cache_store.h"
#include "fusefs/data_path.h"
#include "fusefs/filesystem.h"
#include "prefetch/engine.h"

namespace epochfs::fusefs {

struct MountOptions {
  std::string source;
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  // FUSE worker threads. libfuse's default of 10 lets ten slow source reads block every other
  // request; the threads are created on demand, so a high cap costs nothing when idle.
  unsigned threads = 64;
  bool allow_other = false;
  FilesystemOptions fs;
  // The local-disk cache. Disabled when cache.capacity_bytes is 0.
  cachestore::CacheOptions cache;
  prefetch::EngineOptions engine;
  DataPath data_path = DataPath::kClassic;
  // KiB the kernel reads ahead in the mount's files (fusefs/kernel_readahead.h); 0: its own.
  unsigned read_ahead_kb = 0;
  // Requests by FUSE over io_uring where the kernel offers it (fusefs/uring_transport.h).
  bool fuse_uring = false;
  // Where to write the Prometheus metrics every few seconds (node_exporter's textfile
  // collector); none if empty.
  std::string metrics_file;
  // Where to serve them over HTTP (HOST:PORT, GET /metrics); nowhere if empty.
  std::string metrics_listen;
  // Log to this file (already opened with cachestore::open_log_file); to syslog when empty and
  // in the background, else to stderr.
  std::string log_file;
  // Extra -o options passed to libfuse as given.
  std::vector<std::string> fuse_options;
};

}  // namespace epochfs::fusefs
