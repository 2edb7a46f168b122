// Copying a source file into the cache, hashing it on the way: the hash is what a kept copy is
// checked against before a later mount serves it.
#pragma once

#include <cstdint>
#include <functional>

#include "cachestore/cache_store.h"
#include "cachestore/status.h"

namespace epochfs::cachestore {

// XXH3-64 of the first size bytes read from fd.
Result<uint64_t> hash_fd(int fd, uint64_t size);

// Copies staging.size() bytes from source_fd, from source_offset on (a block of a large file;
// 0 for a whole file), into staging's file and returns their XXH3-64 hash. Fails with EIO if
// the source ends early. On failure *cache_fault says whether the cache disk (write) or the
// source (read) failed.
Result<uint64_t> copy_into(int source_fd, Staging& staging, bool* cache_fault,
                           const std::function<void()>& progress = {}, uint64_t source_offset = 0);

}  // namespace epochfs::cachestore
