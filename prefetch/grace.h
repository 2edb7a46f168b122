// Grace: when everything that was under way at some moment has finished, so that an id no
// structure holds any more can be handed out again (FileRegistry::recycle) without a late
// holder, one that read it before it was released, mistaking the next path's id for it.
//
// Epoch-based, as RCU and crossbeam-epoch reclaim memory: every operation that may hold a
// FileId it read from a shared structure (a FUSE request, a stager job from its queueing to
// its end, an upload from its first write to its publish) holds a Ticket, taken in the
// current epoch. The one reclaiming thread advances the epoch when no ticket of the previous
// one is left: an id released in epoch e may be recycled once the epoch is e + 2, since every
// ticket taken up to e has been given back by then.
//
// Thread-safety: tickets may be taken and given back from any thread (two atomic counters);
// advance() is called by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>

namespace epochfs::prefetch {

class Grace {
 public:
  // Holds the epoch it was taken in until destroyed. Movable, so queued jobs can carry one.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(Grace& grace);
    ~Ticket();
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    Grace* grace_ = nullptr;
    uint64_t epoch_ = 0;
  };

  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // Moves to the next epoch if no ticket of the one before the current is held; the epoch now.
  uint64_t advance();

 private:
  uint64_t enter();
  void leave(uint64_t epoch);

  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> held_[2] = {0, 0};  // tickets by epoch parity
};

}  // namespace epochfs::prefetch
