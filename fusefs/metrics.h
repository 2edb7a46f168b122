// Prometheus metrics: the daemon's statistics in the text exposition format (version 0.0.4),
// served as <mount>/.epochfs/metrics and written to --metrics-file for node_exporter's
// textfile collector. Names start with `epochfs_`, carry their unit, and counters end in
// `_total`; every series carries the mount's `mountpoint` and `source` labels (two mounts on a
// node write distinct series), per-stream series a `stream` label too. docs/stats.md lists
// every metric.
//
// MetricsFileWriter rewrites the file every few seconds, atomically (a temporary file renamed
// over it), so a collector never reads half a file, and removes it when the mount ends.
//
// Thread-safety: metrics_text is a pure function; the writer owns its thread.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "cachestore/sync.h"
#include "fusefs/request_counts.h"
#include "prefetch/engine.h"

namespace epochfs::fusefs {

// How reads are served, for the data-path metrics.
struct DataPathFigures {
  bool passthrough = false;
  const char* classic_because = "";  // why passthrough is not active (fusefs/passthrough.h)
  uint64_t passthrough_opens = 0;
  uint64_t source_passthrough_opens = 0;
  uint64_t backing_files = 0;
  bool fuse_uring = false;          // requests by FUSE over io_uring (fusefs/uring_transport.h)
  const char* device_because = "";  // why not (when asked for)
  uint64_t ring_requests = 0;
};

// The verifies of the mount's cache (its control directory counts them).
struct VerifyFigures {
  uint64_t runs = 0;    // verifies run
  uint64_t shared = 0;  // opens that waited for a verify under way and shared its document
};

// The labels every series of one mount carries.
struct MountLabels {
  std::string mountpoint;
  std::string source;
};

std::string metrics_text(const prefetch::EngineStats& stats, const DataPathFigures& data_path,
                         const MountLabels& mount, const VerifyFigures& verify = {},
                         const RequestFigures& requests = {});

class MetricsFileWriter {
 public:
  // Writes make() to path every period until destroyed, then removes path.
  MetricsFileWriter(std::string path, std::function<std::string()> make,
                    std::chrono::milliseconds period);
  ~MetricsFileWriter();
  MetricsFileWriter(const MetricsFileWriter&) = delete;
  MetricsFileWriter& operator=(const MetricsFileWriter&) = delete;

 private:
  void write_once();
  void run();

  const std::string path_;
  const std::function<std::string()> make_;
  const std::chrono::milliseconds period_;
  cachestore::Mutex mu_;
  cachestore::CondVar wake_{&mu_};
  bool stopping_ GUARDED_BY(mu_) = false;
  bool failing_ = false;  // the last write failed (logged once until it works again)
  std::thread thread_;
};

}  // namespace epochfs::fusefs
