// OnExit: runs a function when the scope ends, by any way out (an exception too).
#pragma once

#include <utility>

namespace epochfs::cachestore {

template <typename F>
class OnExit {
 public:
  explicit OnExit(F f) : f_(std::move(f)) {}

  ~OnExit() { f_(); }

  OnExit(const OnExit&) = delete;
  OnExit& operator=(const OnExit&) = delete;

 private:
  F f_;
};

}  // namespace epochfs::cachestore
