// The arithmetic of answering a READ from a cached copy (fusefs/fuse_read.cc), kernel-free:
// how many bytes the copy must give, and whether a pipe of a given size can carry them.
//
// A copy is served only if it gives exactly the bytes its version has at that offset: fewer
// (a copy cut short or damaged since) and the read is answered from the source instead.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace epochfs::fusefs {

inline constexpr size_t kPipePage = 4096;

// Bytes a read of size at off must return from a file of file_size bytes.
inline size_t bytes_expected(uint64_t file_size, off_t off, size_t size) {
  const auto at = static_cast<uint64_t>(off);
  return at >= file_size ? 0 : static_cast<size_t>(std::min<uint64_t>(size, file_size - at));
}

// Whether a pipe of capacity bytes holds len bytes spliced from offset off: a pipe holds one
// page per slot, and a read not aligned to a page touches one page more than its length says.
inline bool pipe_holds(size_t capacity, off_t off, size_t len) {
  const size_t skew = static_cast<size_t>(off) % kPipePage;
  return (skew + len + kPipePage - 1) / kPipePage * kPipePage <= capacity;
}

}  // namespace epochfs::fusefs
