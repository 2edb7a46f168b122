// What the prefetch engine counted since the mount (Engine::stats): the stats document's
// top level (docs/stats.md).
#pragma once

#include <cstdint>
#include <string>

#include "cachestore/cache_store.h"
#include "prefetch/latency_histogram.h"
#include "prefetch/planner.h"
#include "prefetch/source_guard.h"

namespace epochfs::prefetch {

// Counters since the mount; a snapshot.
struct EngineStats {
  uint64_t opens = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_from_cache = 0;
  uint64_t bytes_from_source = 0;
  uint64_t source_stats = 0;    // version checks that asked the source
  uint64_t stats_ahead = 0;     // source stats of cached files just ahead of a stream
  uint64_t fresh_lookups = 0;   // lookups answered from those
  uint64_t copies_dropped = 0;  // not staged: queue full, or no descriptor for the copy
  uint64_t copies_queued = 0;   // handed to the stager, not finished (queued or running)
  uint64_t copy_limit = 0;      // prefetch copies allowed in flight now (copy_concurrency.h)
  uint64_t files_known = 0;
  uint64_t paths_released = 0;              // paths only ended jobs' orders named, forgotten
  uint64_t upload_bytes = 0;                // held by uploads being written
  uint64_t path_bytes = 0;                  // new paths users' orders added to the registry
  uint64_t uploads_over_limit = 0;          // writes refused by the upload memory limits
  uint64_t waits = 0;                       // opens that waited for a copy in flight
  uint64_t stall_ns = 0;                    // time those opens waited
  uint64_t waits_abandoned = 0;             // of those, gave up on a copy that made no progress
  uint64_t prefetches = 0;                  // copies the planner started
  uint64_t block_hits = 0;                  // reads of a block of a range order from its copy
  uint64_t block_misses = 0;                // and from the source
  uint64_t block_waits = 0;                 // block reads that waited for the block's copy
  uint64_t block_stall_ns = 0;              // time those reads waited
  uint64_t joined_copies = 0;               // whole copies made of a file's cached blocks
  uint64_t joined_bytes = 0;                // their sizes (in cache.bytes_staged too)
  LatencyHistogram::Snapshot open_latency;  // of open_file, hits and misses
  LatencyHistogram::Snapshot copy_latency;  // of copies into the cache, from the source's open
  bool cache_enabled = false;
  SourceHealth source;
  std::string cache_dir;
  cachestore::CacheStats cache;
  PlannerStats planner;
};

}  // namespace epochfs::prefetch
