#include "prefetch/grace.h"

#include <utility>

namespace epochfs::prefetch {

Grace::Ticket::Ticket(Grace& grace) : grace_(&grace), epoch_(grace.enter()) {}

Grace::Ticket::~Ticket() {
  if (grace_ != nullptr) {
    grace_->leave(epoch_);
  }
}

Grace::Ticket::Ticket(Ticket&& other) noexcept
    : grace_(std::exchange(other.grace_, nullptr)), epoch_(other.epoch_) {}

Grace::Ticket& Grace::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (grace_ != nullptr) {
      grace_->leave(epoch_);
    }
    grace_ = std::exchange(other.grace_, nullptr);
    epoch_ = other.epoch_;
  }
  return *this;
}

uint64_t Grace::enter() {
  // Counted under the epoch read, then read again: if it moved meanwhile, the count may have
  // gone to a parity advance() already found empty, so it is taken again under the new one.
  // Sequentially consistent, so that advance's read of the count and this re-read of the
  // epoch cannot both miss the other's write.
  for (;;) {
    const uint64_t e = epoch_.load();
    held_[e & 1].fetch_add(1);
    if (epoch_.load() == e) {
      return e;
    }
    held_[e & 1].fetch_sub(1);
  }
}

void Grace::leave(uint64_t epoch) { held_[epoch & 1].fetch_sub(1); }

uint64_t Grace::advance() {
  const uint64_t e = epoch_.load();
  // Tickets of epoch e - 1 share the parity of e + 1: none may be left before moving on.
  if (held_[(e + 1) & 1].load() == 0) {
    epoch_.store(e + 1);
    return e + 1;
  }
  return e;
}

}  // namespace epochfs::prefetch
