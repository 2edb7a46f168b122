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
// source (read) failed. progress (if given) is called as the copy moves: at each 128 KiB read
// from the source and each 256 KiB chunk written.
Result<uint64_t> copy_into(int source_fd, Staging& staging, bool* cache_fault,
                           const std::function<void()>& progress = {}, uint64_t source_offset = 0);

// Copies length bytes of from_fd at from_offset into staging's file at to_offset, within the
// kernel (copy_file_range): pieces of a copy that are on the cache's own filesystem already,
// as a file's cached blocks are. Fails (EXDEV, EOPNOTSUPP, ...) where the filesystem cannot,
// and with EIO if from_fd ends early. *cache_fault as copy_into's: the disk failed.
Status copy_range(int from_fd, uint64_t from_offset, Staging& staging, uint64_t to_offset,
                  uint64_t length, bool* cache_fault);

}  // namespace epochfs::cachestore
