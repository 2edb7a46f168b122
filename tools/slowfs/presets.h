// Named settings of epochfs-slowfs for the shared storage it stands in for. An open or a read
// (of up to 128 KiB) takes `latency_ms` of the server's time, a lookup or getattr
// `meta_latency_ms`; read data then shares one link of `bandwidth_mbs`; `max_inflight`
// requests are served at once (the server's threads). docs/benchmarks.md compares what each
// preset gives with published figures for the real thing.
#pragma once

#include <string_view>

namespace epochfs::slowfs {

struct StoragePreset {
  std::string_view name;
  std::string_view models;
  double latency_ms;       // per open and read
  double meta_latency_ms;  // per lookup and getattr
  double bandwidth_mbs;
  unsigned max_inflight;
};

// Data latency: a network round trip (0.1-0.2 ms on Ethernet) plus the server's service time
// for a dataset read at random from its disks, not from its memory (an assumption: no
// published per-file figure was found). Metadata latency: a round trip plus a lookup in the
// server's memory (NFS), or the metadata server's stat time (Lustre: ~2,000-2,500 stats/s
// from one thread). Bandwidth: measured NFS and Lustre client throughput. Requests at once:
// Debian's default of 8 nfsd threads (1 GbE), a tuned server (10 GbE); for Lustre, 8 RPCs in
// flight (the default) to each of 8 storage targets.
inline constexpr StoragePreset kStoragePresets[] = {
    {"nfs-1g", "NFS over 1 GbE", 2.0, 0.25, 117, 8},
    {"nfs-10g", "NFS over 10 GbE", 2.0, 0.15, 1170, 64},
    {"lustre", "a parallel filesystem (Lustre) over InfiniBand", 1.0, 0.5, 2000, 64},
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
