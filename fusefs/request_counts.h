// RequestCounts: the kernel's requests the daemon answered, by kind, so that an operator sees
// what an open of a file costs (each request is a round trip of 21-29 us on the machines we
// measured; docs/benchmarks.md).
//
// Thread-safety: count() from any FUSE worker; one cache line per kind, so that workers
// counting different kinds do not share a line.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace epochfs::fusefs {

enum class Request : uint8_t {
  kLookup,
  kGetattr,
  kOpen,
  kRead,
  kFlush,
  kRelease,
  kIoctl,
  kOther,
  kKinds
};

// The names the stats and the metrics give them, in Request's order.
inline constexpr std::array<const char*, static_cast<size_t>(Request::kKinds)> kRequestNames = {
    "lookup", "getattr", "open", "read", "flush", "release", "ioctl", "other"};

using RequestFigures = std::array<uint64_t, static_cast<size_t>(Request::kKinds)>;

class RequestCounts {
 public:
  void count(Request kind) {
    counts_[static_cast<size_t>(kind)].n.fetch_add(1, std::memory_order_relaxed);
  }

  RequestFigures figures() const {
    RequestFigures f{};
    for (size_t i = 0; i < f.size(); ++i) {
      f[i] = counts_[i].n.load(std::memory_order_relaxed);
    }
    return f;
  }

 private:
  struct alignas(64) Count {
    std::atomic<uint64_t> n{0};
  };

  std::array<Count, static_cast<size_t>(Request::kKinds)> counts_;
};

}  // namespace epochfs::fusefs
