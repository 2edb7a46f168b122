#include "prefetch/stager.h"

#include <boost/asio/post.hpp>

namespace epochfs::prefetch {

Stager::Stager(unsigned threads, unsigned max_pending)
    : max_pending_(max_pending), pool_(threads) {}

Stager::~Stager() { shutdown(); }

bool Stager::try_submit(std::function<void()> job) {
  if (stopping_.load(std::memory_order_acquire)) {
    return false;
  }
  if (pending_.fetch_add(1, std::memory_order_relaxed) >= max_pending_) {
    pending_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  boost::asio::post(pool_, [this, job = std::move(job)] {
    // Acquire pairs with shutdown's release: after stop, queued copies are skipped.
    if (!stopping_.load(std::memory_order_acquire)) {
      job();
    }
    pending_.fetch_sub(1, std::memory_order_relaxed);
  });
  return true;
}

void Stager::shutdown() {
  stopping_.store(true, std::memory_order_release);
  pool_.stop();
  pool_.join();
}

}  // namespace epochfs::prefetch
