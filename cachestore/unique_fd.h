// UniqueFd: the one owner of a file descriptor; closes it on destruction.
//
// Thread-safety: like any value; one owner at a time.
#pragma once

#include <unistd.h>

#include <utility>

namespace epochfs::cachestore {

class UniqueFd {
 public:
  UniqueFd() = default;

  explicit UniqueFd(int fd) : fd_(fd) {}

  ~UniqueFd() { reset(); }

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}

  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset(other.release());
    }
    return *this;
  }

  int get() const { return fd_; }

  bool valid() const { return fd_ >= 0; }

  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }

  void reset(int fd = -1) {
    if (fd_ >= 0) {
      // Close errors on a read-only fd carry no information we could act on.
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace epochfs::cachestore
