// Named settings of epochfs-slowfs for the shared storage it stands in for. Each request (an
// open, a read of up to 128 KiB) waits `latency_ms` (network round trips plus the server's
// service time), reads share one link of `bandwidth_mbs`, and `max_inflight` requests are
// served at once (the server's threads). docs/benchmarks.md compares what each preset gives
// with published figures for the real thing.
#pragma once

#include <string_view>

namespace epochfs::slowfs {

struct StoragePreset {
  std::string_view name;
  std::string_view models;
  double latency_ms;
  double bandwidth_mbs;
  unsigned max_inflight;
};

// Latency: a network round trip (0.1-0.2 ms on Ethernet) plus the server's service time for
// a dataset that is read at random from its disks, not from its memory. Bandwidth: measured
// NFS and Lustre client throughput. Requests at once: nfsd threads of a tuned server; for
// Lustre, 8 RPCs in flight (the default) to each of 8 storage targets.
inline constexpr StoragePreset kStoragePresets[] = {
    {"nfs-1g", "NFS over 1 GbE", 2.0, 117, 8},
    {"nfs-10g", "NFS over 10 GbE", 2.0, 1170, 64},
    {"lustre", "a parallel filesystem (Lustre) over InfiniBand", 1.0, 2000, 64},
};

inline const StoragePreset* find_storage_preset(std::string_view name) {
  for (const auto& p : kStoragePresets) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

}  // namespace epochfs::slowfs
