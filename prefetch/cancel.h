// Cancel: whether the FUSE request a thread serves was interrupted, so that every wait the
// request makes (for the source, for a copy in flight) can stop when its reader is killed.
//
// Thread-safety: cancel() may be called from any thread; a Scope belongs to its thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace epochfs::prefetch {

// Whether the request a thread serves was interrupted (its reader was killed). The FUSE layer
// keeps one per worker thread and names it for the thread with a Scope, so that no signature
// between it and the guard has to carry it. One atomic word holds the request being served
// and the cancel bit, so an interrupt that comes late, for a request already answered, cannot
// cancel the next one.
class Cancel {
 public:
  // A new request begins; token is its identity (an aligned pointer, unique while it lives).
  void begin(const void* token) { state_.store(reinterpret_cast<uintptr_t>(token)); }

  // Cancels the request token if it is still the one served. True if it was.
  bool cancel(const void* token) {
    auto expected = reinterpret_cast<uintptr_t>(token);
    return state_.compare_exchange_strong(expected, expected | 1);
  }

  bool cancelled() const { return (state_.load() & 1) != 0; }

  // While it lives, calls made on this thread stop waiting when cancel is set.
  class Scope {
   public:
    explicit Scope(const Cancel* cancel);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const Cancel* outer_;
  };

  // The Cancel of the request this thread serves, if any.
  static const Cancel* current();

  // Whether the request this thread serves was cancelled.
  static bool current_cancelled() {
    const Cancel* c = current();
    return c != nullptr && c->cancelled();
  }

 private:
  std::atomic<uintptr_t> state_{0};
};

}  // namespace epochfs::prefetch
