#include "cachestore/copy.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string_view>

#include <xxhash.h>

#include "cachestore/disk_watch.h"
#include "cachestore/root_dir.h"

namespace epochfs::cachestore {

namespace {

// Reads size bytes of fd from start on in 256 KiB chunks (a typical ~110 KB sample in one
// read), hashes them with XXH3-64 and hands each chunk to sink. A read error, or the file
// ending early (EIO), stops it; so does a sink error.
Result<uint64_t> hash_chunks(int fd, uint64_t start, uint64_t size, const std::string& what,
                             const std::function<Status(const char*, size_t)>& sink) {
  // Per copy thread, not zero-filled (a vector's would be): only the pages a copy touches
  // become resident, so 128 threads copying 100 kB files keep ~13 MiB, not 32 (the soak
  // benchmark's finding).
  constexpr size_t kChunk = 256 << 10;
  thread_local std::unique_ptr<char[]> buf(new char[kChunk]);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  Status failure;
  for (uint64_t off = 0; off < size && failure.is_ok();) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    auto got = pread_full(fd, buf.get(), want, static_cast<off_t>(start + off), what);
    if (!got.is_ok() || got.value() < want) {
      failure =
          got.is_ok() ? Status::error(EIO, "read " + what + ": it ended early") : got.status();
      break;
    }
    XXH3_64bits_update(state, buf.get(), want);
    failure = sink(buf.get(), want);
    off += want;
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!failure.is_ok()) {
    return failure;
  }
  return hash;
}

}  // namespace

Result<uint64_t> hash_fd(int fd, uint64_t size) {
  return hash_chunks(fd, 0, size, "cached copy", [](const char*, size_t) { return Status::ok(); });
}

Result<uint64_t> copy_into(int source_fd, Staging& staging, bool* cache_fault,
                           const std::function<void()>& progress, uint64_t source_offset) {
  *cache_fault = false;
  return hash_chunks(
      source_fd, source_offset, staging.size(), "source", [&](const char* data, size_t len) {
        const DiskWatch::Op op = staging.watch_io();
        Status written = write_all(staging.fd(), std::string_view(data, len), "cache copy");
        *cache_fault = !written.is_ok();
        if (written.is_ok() && progress) {
          progress();
        }
        return written;
      });
}

}  // namespace epochfs::cachestore
