// Test helpers: a file's pages in the page cache, counted and dropped (mincore, fadvise).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/unique_fd.h"

namespace epochfs::test {

// Pages of the file at path in the page cache now.
inline size_t resident_pages(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  const auto size = static_cast<size_t>(::lseek(fd.get(), 0, SEEK_END));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  REQUIRE(map != MAP_FAILED);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  REQUIRE(::mincore(map, size, in.data()) == 0);
  ::munmap(map, size);
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [](auto c) { return c & 1; }));
}

// Pages the file at path has.
inline size_t pages_of(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (static_cast<size_t>(::lseek(fd.get(), 0, SEEK_END)) + page - 1) / page;
}

// Drops the pages of the file at path from the page cache (written back first: dirty pages
// would stay).
inline void drop_pages(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(::fdatasync(fd.get()) == 0);
  REQUIRE(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) == 0);
}

}  // namespace epochfs::test
