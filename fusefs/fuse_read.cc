// READ: a cached copy's bytes through a pipe per worker (or a buffer when no pipe can be had),
// checked before anything is sent, so that a failing copy is answered from the source
// instead; the source's through the engine's guard; control files from their snapshot.
//
// Why a failed copy is noticed here and not in the Filesystem: the copy's bytes go to the
// kernel by splice, without passing through the daemon's memory, so only the code that moves
// them into the pipe sees a short or failed read before the reply. What to do then (drop the
// copy, switch the open to the source, read it there) is the Filesystem's: read_source_instead.
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "cachestore/unique_fd.h"
#include "fusefs/control_dir.h"
#include "fusefs/copy_read.h"
#include "fusefs/filesystem.h"
#include "fusefs/fuse_reply.h"

namespace epochfs::fusefs {
namespace {

// A pipe per FUSE worker, for reads of cached copies: the copy's pages are spliced into it
// first, so that a failed or short read of the copy is seen here, before anything is sent,
// and the reader can be answered from the source instead. (Handing the copy's fd to
// fuse_reply_data would let libfuse reply the error to the reader itself.)
struct CopyPipe {
  cachestore::UniqueFd r;
  cachestore::UniqueFd w;
  size_t capacity = 0;

  void reset() {
    r.reset();
    w.reset();
    capacity = 0;
  }

  // Ready for len bytes at off; false if this pipe cannot hold them. A pipe holds one page per
  // slot, and a read not aligned to a page touches one page more than its length says.
  bool ready(off_t off, size_t len) {
    if (!r.valid()) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        return false;
      }
      r.reset(fds[0]);
      w.reset(fds[1]);
      // Beyond the per-user pipe limit the kernel refuses to grow it: keep the default size,
      // which still takes the small reads.
      const int got = fcntl(w.get(), F_SETPIPE_SZ, 1 << 20);
      const int size = got > 0 ? got : fcntl(w.get(), F_GETPIPE_SZ);
      capacity = size > 0 ? static_cast<size_t>(size) : 0;
    }
    return pipe_holds(capacity, off, len);
  }

  // Moves up to len bytes of fd at off into the pipe; the count, or -errno. Never blocks: a
  // full pipe (EAGAIN) is an error of the pipe, not of the copy.
  ssize_t fill(int fd, off_t off, size_t len) {
    size_t total = 0;
    while (total < len) {
      loff_t pos = off + static_cast<off_t>(total);
      const ssize_t n =
          splice(fd, &pos, w.get(), nullptr, len - total, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        return -errno;
      }
      if (n == 0) {
        break;
      }
      total += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(total);
  }

  // True if nothing is left in the pipe (a reply that failed half-way leaves bytes behind).
  bool empty() const {
    int queued = 0;
    return ioctl(r.get(), FIONREAD, &queued) == 0 && queued == 0;
  }
};

enum class CopyRead { kSent, kFailed, kNoPipe };

// Answers a read of the expected bytes at off of a cached copy through the worker's pipe.
// kFailed, with nothing sent, if the copy could not give them: the caller reads the source
// instead.
CopyRead reply_from_copy(fuse_req_t req, int fd, size_t expected, off_t off) {
  thread_local CopyPipe pipe;
  if (expected == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return CopyRead::kSent;
  }
  if (!pipe.ready(off, expected)) {
    return CopyRead::kNoPipe;
  }
  const ssize_t n = pipe.fill(fd, off, expected);
  if (n != static_cast<ssize_t>(expected)) {
    pipe.reset();  // drop whatever part was spliced
    return n == -EAGAIN ? CopyRead::kNoPipe : CopyRead::kFailed;
  }
  fuse_bufvec buf = FUSE_BUFVEC_INIT(expected);
  buf.buf[0].flags = FUSE_BUF_IS_FD;
  buf.buf[0].fd = pipe.r.get();
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  if (!pipe.empty()) {
    pipe.reset();
  }
  return CopyRead::kSent;
}

// expected bytes of fd from off, read into the worker's buffer; nullptr if the copy could not
// give them.
const char* read_copy_buffered(int fd, size_t expected, off_t off) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < expected) {
    buffer.resize(expected);  // at most one read's size (max_read) per worker
  }
  auto got = cachestore::pread_full(fd, buffer.data(), expected, off, "cached copy");
  return got.is_ok() && got.value() == expected ? buffer.data() : nullptr;
}

// Answers a read of a cached copy through a buffer, when no pipe can be had (pipe2 refused,
// EMFILE, or a pipe the kernel would not grow past an unprivileged user's limit). As through
// the pipe, kFailed with nothing sent if the copy could not give the bytes its version has:
// replying from the copy's fd instead would hand its error or short read to the reader.
CopyRead reply_copy_buffered(fuse_req_t req, int fd, size_t expected, off_t off) {
  const char* data = read_copy_buffered(fd, expected, off);
  if (data == nullptr) {
    return CopyRead::kFailed;
  }
  fuse_reply_buf(req, data, expected);
  return CopyRead::kSent;
}

void reply_result(fuse_req_t req, const cachestore::Result<std::string>& data) {
  if (!data.is_ok()) {
    reply_status(req, data.status());
    return;
  }
  fuse_reply_buf(req, data.value().data(), data.value().size());
}

// Answers from the open's cached copy if it reads from one: false if it does not, or if the
// copy failed and nothing was sent.
bool replied_from_copy(fuse_req_t req, DataOpen& file, size_t size, off_t off) {
  // One load says both where to read and whether it is the copy: a worker that saw the copy
  // flag and then the source's fd would read the source inside a watch of the cache disk.
  const int fd = file.read_fd.load(std::memory_order_acquire);
  if (!file.file.from_cache || fd != file.file.fd.get()) {
    return false;
  }
  const auto watch = fs_of(req).watch_copy_read();
  const size_t expected = bytes_expected(static_cast<uint64_t>(file.file.version.size), off, size);
  CopyRead r = reply_from_copy(req, fd, expected, off);
  if (r == CopyRead::kNoPipe) {
    r = reply_copy_buffered(req, fd, expected, off);
  }
  return r == CopyRead::kSent;
}

// A read of a file read by blocks (prefetch/blocks.h): when it lies in one block with a ready
// copy, read from the copy into the worker's buffer and sent; else block by block through the
// engine. Not through the pipe as a whole file's copy: for the kernel's 128 KiB readahead
// READs of small samples, splicing was 12-20% slower than this buffer (docs/benchmarks.md).
void reply_blocks(fuse_req_t req, DataOpen& file, size_t size, off_t off) {
  Filesystem& fs = fs_of(req);
  const uid_t reader = fuse_req_ctx(req)->uid;
  if (auto slice = fs.block_slice(file, size, off, reader)) {
    const char* data = nullptr;
    {
      const auto watch = fs.watch_copy_read();
      data = read_copy_buffered(slice->copy->fd.get(), slice->len, slice->off);
    }
    fs.block_slice_done(*slice, data != nullptr);
    if (data != nullptr) {
      fuse_reply_buf(req, data, slice->len);
      return;
    }
  }
  reply_result(req, fs.read_blocks(file, size, off, reader));
}

void reply_data(fuse_req_t req, DataOpen& file, size_t size, off_t off) {
  Filesystem& fs = fs_of(req);
  if (file.file.blocks != nullptr) {
    reply_blocks(req, file, size, off);
    return;
  }
  fs.count_read(file, size, static_cast<uint64_t>(off));
  if (file.reading_copy.load(std::memory_order_acquire)) {
    if (replied_from_copy(req, file, size, off)) {
      return;
    }
    if (file.reading_copy.load(std::memory_order_acquire)) {
      // The copy failed: the rest comes from the source, at the version this reader has been
      // reading (outside the disk watch: a slow source is not a hung cache disk).
      reply_result(req, fs.read_source_instead(file, size, off));
      return;
    }
  }
  // From the source: through a buffer, read by the engine's guard, so that a hung source
  // cannot hold this reader in the kernel unkillably.
  reply_result(req, fs.read_source(file, size, off));
}

void reply_read(fuse_req_t req, FileHandle& handle, size_t size, off_t off) {
  if (DataOpen* data = handle.data()) {
    reply_data(req, *data, size, off);
    return;
  }
  // A control file's snapshot (an upload reads as empty). A copy, not a pointer into the
  // handle: once the kernel has the reply (inside writev), it may send RELEASE, and another
  // worker may free the handle before writev returns.
  const ControlOpen* control = handle.control();
  const std::string_view text = control != nullptr ? control->content : std::string_view();
  const size_t start = std::min(text.size(), static_cast<size_t>(off));
  const std::string chunk(text.substr(start, size));
  fuse_reply_buf(req, chunk.data(), chunk.size());
}

// A read that came without a file handle: the kernel opened the file without asking
// (--data-path no-open).
void reply_implicit_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  Filesystem& fs = fs_of(req);
  if (is_control(ino)) {
    const std::string chunk = fs.control_file_read(ino, static_cast<uint64_t>(off), size);
    fuse_reply_buf(req, chunk.data(), chunk.size());
    return;
  }
  auto lease = fs.implicit_open(ino, static_cast<uint64_t>(off), fuse_req_ctx(req)->uid);
  if (!lease.is_ok()) {
    reply_status(req, lease.status());
    return;
  }
  reply_read(req, lease.value()->handle(), size, off);  // the lease outlives the reply
}

}  // namespace

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  if (fi->fh == 0) {
    reply_implicit_read(req, ino, size, off);
    return;
  }
  reply_read(req, *file_of(fi), size, off);
}

}  // namespace epochfs::fusefs
