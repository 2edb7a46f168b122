// DiskWatch: notices a cache disk that has stopped answering (a dead local disk, a wedged
// controller, a hung filesystem under --cache-dir), so that readers are served from the source
// instead of queueing behind it.
//
// The system calls on the cache disk that readers and copies wait on most (opening and reading
// a copy, creating, writing and renaming a copy being made) run inside an Op, which records
// when it started; the rarer ones (unlinks, the hash check of a kept copy) are not watched. The
// disk counts as hung while some Op has been running for longer than `stuck_ns`, and as healthy
// again as soon as none has: a verdict that follows the disk, never a switch that stays off. A
// healthy disk, even a slow one under load, ends each call well within the limit (a call is at most
// one 256 KiB chunk or one open).
//
// Ops live in a fixed array of slots: no allocation and no lock on the read path. An Op that
// finds every slot taken runs unwatched: with more calls at once than slots (possible only with
// --threads and --stage-threads raised well above their defaults) a stuck call may go unseen
// while the slots are held by others.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace epochfs::cachestore {

class DiskWatch {
 public:
  // One call on the disk, from its start to the end of the Op's scope.
  class Op {
   public:
    Op() = default;

    ~Op() {
      if (slot_ != nullptr) {
        slot_->store(0, std::memory_order_release);
      }
    }

    Op(Op&& other) noexcept : slot_(std::exchange(other.slot_, nullptr)) {}

    Op& operator=(Op&&) = delete;
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;

   private:
    friend class DiskWatch;

    explicit Op(std::atomic<int64_t>* slot) : slot_(slot) {}

    std::atomic<int64_t>* slot_ = nullptr;
  };

  explicit DiskWatch(int64_t stuck_ns) : stuck_ns_(stuck_ns) {}

  Op begin();

  // Whether some call has been running for longer than stuck_ns.
  bool hung() const;

 private:
  static constexpr size_t kSlots = 256;  // above the default 64 FUSE and 128 copy threads

  const int64_t stuck_ns_;
  std::array<std::atomic<int64_t>, kSlots> started_{};  // 0: free
  std::atomic<size_t> next_{0};
};

}  // namespace epochfs::cachestore
