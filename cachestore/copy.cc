#include "cachestore/copy.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include <xxhash.h>

#include "cachestore/disk_watch.h"
#include "cachestore/on_exit.h"
#include "cachestore/root_dir.h"
#include "cachestore/sync.h"

namespace epochfs::cachestore {

namespace {

constexpr size_t kChunk = 256 << 10;
// A copy asks for this much of its source ahead of its reads, in pieces of kAskPiece: each
// piece is a read the kernel starts at once (POSIX_FADV_WILLNEED), so a block's reads wait
// for the source's latency together rather than one after another (docs/benchmarks.md,
// "Single-file datasets"). The kernel starts at most its readahead window (128 KiB on FUSE)
// per call.
constexpr uint64_t kAskAhead = 1 << 20;
constexpr uint64_t kAskPiece = 128 << 10;

// Asks the kernel to read fd's bytes [*asked, until) ahead; *asked becomes until.
void ask_ahead(int fd, uint64_t* asked, uint64_t until) {
  while (*asked < until) {
    const uint64_t len = std::min(kAskPiece, until - *asked);
    ::posix_fadvise(fd, static_cast<off_t>(*asked), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    *asked += len;
  }
}

// Chunk buffers shared by the copy threads, so that a buffer's pages are faulted in (and zeroed
// by the kernel) once, at its first use. A buffer per thread was faulted in again by nearly
// every copy: the stager hands copies to its 128 threads in turn while ~8 run at once, so each
// thread copied a block or two an epoch, and page faults took 12% of the copy threads' CPU in
// a single-file dataset's epoch 1. Not zero-filled (a vector's would be): only pages a copy
// touches become resident. At most kKeptIdle idle buffers are kept, so what stays resident
// follows the copies that ran at once, not the threads.
class ChunkBuffers {
 public:
  static constexpr size_t kKeptIdle = 32;  // 8 MiB

  std::unique_ptr<char[]> take() {
    {
      MutexLock lock(mu_);
      if (!idle_.empty()) {
        auto buf = std::move(idle_.back());
        idle_.pop_back();
        return buf;
      }
    }
    return std::unique_ptr<char[]>(new char[kChunk]);
  }

  void give(std::unique_ptr<char[]> buf) {
    MutexLock lock(mu_);
    if (idle_.size() < kKeptIdle) {
      idle_.push_back(std::move(buf));  // within the capacity reserved: never throws
    }
  }

  ChunkBuffers() { idle_.reserve(kKeptIdle); }

 private:
  Mutex mu_;
  std::vector<std::unique_ptr<char[]>> idle_ GUARDED_BY(mu_);
};

ChunkBuffers& chunk_buffers() {
  static ChunkBuffers buffers;
  return buffers;
}

// Reads want bytes of fd at offset into buf, in reads of at most kAskPiece, calling read after
// each: a waiter judges a copy by its longest call into the source, and on a source whose
// reads take a second each a chunk's two would otherwise count as one call of two seconds.
Result<size_t> read_pieces(int fd, char* buf, size_t want, uint64_t offset, const std::string& what,
                           const std::function<void()>& read) {
  size_t done = 0;
  while (done < want) {
    const auto piece = static_cast<size_t>(std::min<uint64_t>(kAskPiece, want - done));
    auto got = pread_full(fd, buf + done, piece, static_cast<off_t>(offset + done), what);
    if (!got.is_ok()) {
      return got.status();
    }
    done += got.value();
    if (got.value() < piece) {
      break;  // the file ended
    }
    if (read) {
      read();
    }
  }
  return done;
}

// Reads size bytes of fd from start on in 256 KiB chunks (a typical ~110 KB sample in one
// read), hashes them with XXH3-64 and hands each chunk to sink; read (if given) is called as
// each piece of a chunk is read. A read error, or the file ending early (EIO), stops it; so
// does a sink error. read_ahead is for a source: a cached copy read back is in the page cache
// or on local disk, where asking ahead only costs calls.
Result<uint64_t> hash_chunks(int fd, uint64_t start, uint64_t size, const std::string& what,
                             bool read_ahead,
                             const std::function<Status(const char*, size_t)>& sink,
                             const std::function<void()>& read = {}) {
  std::unique_ptr<char[]> buf = chunk_buffers().take();
  OnExit given([&] { chunk_buffers().give(std::move(buf)); });
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  Status failure;
  // One chunk's read is left to the kernel's own readahead: a typical sample's copy makes no
  // extra call.
  uint64_t asked = read_ahead && size > kChunk ? start : start + size;
  for (uint64_t off = 0; off < size && failure.is_ok();) {
    ask_ahead(fd, &asked, start + std::min(size, off + kAskAhead));
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    auto got = read_pieces(fd, buf.get(), want, start + off, what, read);
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
  return hash_chunks(fd, 0, size, "cached copy", /*read_ahead=*/false,
                     [](const char*, size_t) { return Status::ok(); });
}

Result<uint64_t> copy_into(int source_fd, Staging& staging, bool* cache_fault,
                           const std::function<void()>& progress, uint64_t source_offset) {
  *cache_fault = false;
  const auto write = [&](const char* data, size_t len) {
    const DiskWatch::Op op = staging.watch_io();
    Status written = write_all(staging.fd(), std::string_view(data, len), "cache copy");
    *cache_fault = !written.is_ok();
    if (written.is_ok() && progress) {
      progress();
    }
    return written;
  };
  return hash_chunks(source_fd, source_offset, staging.size(), "source", /*read_ahead=*/true, write,
                     progress);
}

Status copy_range(int from_fd, uint64_t from_offset, Staging& staging, uint64_t to_offset,
                  uint64_t length, bool* cache_fault) {
  *cache_fault = false;
  auto in = static_cast<loff_t>(from_offset);
  auto out = static_cast<loff_t>(to_offset);
  for (uint64_t left = length; left > 0;) {
    const DiskWatch::Op op = staging.watch_io();
    const ssize_t n = ::copy_file_range(from_fd, &in, staging.fd(), &out, left, 0);
    if (n > 0) {
      left -= static_cast<uint64_t>(n);
    } else if (n == 0) {
      return Status::error(EIO, "copy a cached piece: it ended early");
    } else if (errno != EINTR) {
      *cache_fault = errno == EIO || errno == ENOSPC || errno == EDQUOT || errno == EROFS;
      return Status::error(errno, "copy a cached piece");
    }
  }
  return Status::ok();
}

}  // namespace epochfs::cachestore
