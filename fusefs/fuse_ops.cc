// The FUSE adapter: decode a request, call the Filesystem, reply. No policy lives here.
//
// Each request gets exactly one reply. Nothing here holds a lock while replying: the
// Filesystem's locks are released before its methods return.
#include "fusefs/fuse_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "cachestore/log.h"
#include "fusefs/control_dir.h"
#include "fusefs/filesystem.h"
#include "fusefs/passthrough.h"

namespace epochfs::fusefs {
namespace {

using cachestore::LogLevel;
using cachestore::Status;

struct fuse_conn_info_opts* g_conn_opts = nullptr;

// fh carries a pointer to a handle the Filesystem owns from open/opendir to release.
static_assert(sizeof(FileHandle*) <= sizeof(fuse_file_info::fh));
static_assert(sizeof(DirHandle*) <= sizeof(fuse_file_info::fh));

Filesystem& fs_of(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

FileHandle* file_of(const fuse_file_info* fi) { return reinterpret_cast<FileHandle*>(fi->fh); }

DirHandle* dir_of(const fuse_file_info* fi) { return reinterpret_cast<DirHandle*>(fi->fh); }

// Errors a reader does not expect from a healthy source (as opposed to ENOENT, EROFS, EACCES,
// which are answers): worth an operator's attention.
bool is_fault(int err) {
  switch (err) {
    case EIO:
    case ESTALE:
    case ETIMEDOUT:
    case ENOTCONN:
    case EREMOTEIO:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return true;
    default:
      return false;
  }
}

void reply_status(fuse_req_t req, const cachestore::Status& status) {
  if (!status.is_ok()) {
    const LogLevel level = is_fault(status.error_code()) ? LogLevel::kWarning : LogLevel::kDebug;
    if (cachestore::log_enabled(level)) {
      cachestore::log(level, "%s", status.to_string().c_str());
    }
  }
  fuse_reply_err(req, status.error_code());
}

// Nothing the kernel learns of a control file is kept: each open looks it up afresh, and with
// no-open gets a snapshot of its own (Filesystem::control_file_attr).
double attr_timeout(const Filesystem& fs, InodeId id) {
  return is_control(id) ? 0 : fs.options().attr_timeout_s;
}

double entry_timeout(const Filesystem& fs, InodeId id) {
  return is_control(id) && id != kControlDirId ? 0 : fs.options().entry_timeout_s;
}

fuse_entry_param make_entry(const Filesystem& fs, InodeId id, const struct stat& attr) {
  fuse_entry_param e;
  memset(&e, 0, sizeof(e));
  e.ino = id;
  e.attr = attr;
  e.attr_timeout = attr_timeout(fs, id);
  e.entry_timeout = entry_timeout(fs, id);
  return e;
}

void op_init(void* /*userdata*/, fuse_conn_info* conn) {
  // Splice moves file pages to the kernel without a copy through our memory.
  if ((conn->capable & FUSE_CAP_SPLICE_WRITE) != 0) {
    conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
  }
  if ((conn->capable & FUSE_CAP_CACHE_SYMLINKS) != 0) {
    conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  }
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // RELEASE is a background request: at the kernel's default of 12 in flight (shared with
  // readahead READs), a swarm of readers closing and opening files piles up releases, and each
  // one pending holds the open's descriptor in the daemon. Under a low open-files limit that
  // backlog ran the daemon out of descriptors (the 256-descriptor swarm test, about one run in
  // three). `-o max_background=N` still overrides this.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  if (g_conn_opts != nullptr) {
    fuse_apply_conn_info_opts(g_conn_opts, conn);
  }
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Filesystem& fs = fs_of(req);
  auto entry = fs.lookup(parent, name);
  if (entry.is_ok()) {
    fuse_entry_param e = make_entry(fs, entry.value().id, entry.value().attr);
    fuse_reply_entry(req, &e);
    return;
  }
  if (entry.error_code() == ENOENT && fs.options().negative_timeout_s > 0) {
    // A negative entry: the kernel remembers the miss for the negative timeout.
    fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.entry_timeout = fs.options().negative_timeout_s;
    fuse_reply_entry(req, &e);
    return;
  }
  reply_status(req, entry.status());
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Filesystem& fs = fs_of(req);
  fs.forget(ino, nlookup);
  fs.forgotten();
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  Filesystem& fs = fs_of(req);
  for (size_t i = 0; i < count; ++i) {
    fs.forget(forgets[i].ino, forgets[i].nlookup);
  }
  fs.forgotten();
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  Filesystem& fs = fs_of(req);
  auto st = fs.getattr(ino);
  if (!st.is_ok()) {
    reply_status(req, st.status());
    return;
  }
  fuse_reply_attr(req, &st.value(), attr_timeout(fs, ino));
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  auto target = fs_of(req).readlink(ino);
  if (!target.is_ok()) {
    reply_status(req, target.status());
    return;
  }
  fuse_reply_readlink(req, target.value().c_str());
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto dir = fs_of(req).opendir(ino);
  if (!dir.is_ok()) {
    reply_status(req, dir.status());
    return;
  }
  fi->fh = reinterpret_cast<uint64_t>(dir.value());
  fi->cache_readdir = fs_of(req).options().immutable;
  if (fuse_reply_open(req, fi) != 0) {
    fs_of(req).releasedir(dir.value());  // interrupted: no releasedir will come
  }
}

// Adds one entry to buf; returns the bytes used, 0 to skip the entry (it vanished), or
// kNoRoom. For readdirplus an added entry costs a lookup reference, which the kernel then owns.
constexpr ssize_t kNoRoom = -1;

ssize_t add_plain_entry(fuse_req_t req, const DirEntry& d, char* buf, size_t room) {
  if (fuse_add_direntry(req, nullptr, 0, d.name, nullptr, 0) > room) {
    return kNoRoom;
  }
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = d.ino;
  st.st_mode = static_cast<mode_t>(d.type) << 12;
  return static_cast<ssize_t>(fuse_add_direntry(req, buf, room, d.name, &st, d.next_offset));
}

ssize_t add_plus_entry(fuse_req_t req, fuse_ino_t dir, const DirEntry& d, char* buf, size_t room) {
  if (fuse_add_direntry_plus(req, nullptr, 0, d.name, nullptr, 0) > room) {
    return kNoRoom;
  }
  Filesystem& fs = fs_of(req);
  fuse_entry_param e;
  if (strcmp(d.name, ".") == 0 || strcmp(d.name, "..") == 0) {
    // No lookup for . and ..: node id 0 tells the kernel not to instantiate an entry.
    memset(&e, 0, sizeof(e));
    e.attr.st_ino = d.ino;
    e.attr.st_mode = static_cast<mode_t>(d.type) << 12;
  } else {
    auto entry = fs.lookup(dir, d.name, false);
    if (prefetch::is_outage_error(entry.error_code())) {
      // The source is down and nothing is known of this entry: listed without a node (as .
      // and ..); a later lookup of it waits for the source.
      memset(&e, 0, sizeof(e));
      e.attr.st_ino = d.ino;
      e.attr.st_mode = static_cast<mode_t>(d.type) << 12;
    } else if (!entry.is_ok()) {
      return 0;
    } else {
      e = make_entry(fs, entry.value().id, entry.value().attr);
    }
  }
  return static_cast<ssize_t>(fuse_add_direntry_plus(req, buf, room, d.name, &e, d.next_offset));
}

// The control directory's listing: ".", "..", then kControlEntries; offsets are positions.
void control_readdir(fuse_req_t req, size_t size, off_t off, bool plus) {
  std::vector<const char*> names = {".", ".."};
  names.insert(names.end(), std::begin(kControlEntries), std::end(kControlEntries));
  std::vector<char> buf(size);
  size_t used = 0;
  for (auto i = static_cast<size_t>(off); i < names.size(); ++i) {
    auto id = control_lookup(kControlDirId, names[i]);
    fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.attr = control_attr(id.value_or(kControlDirId));
    // No nodes for control files here: an open looks them up (with no-open, a snapshot each).
    e.ino = 0;
    const auto next = static_cast<off_t>(i + 1);
    const size_t n =
        plus ? fuse_add_direntry_plus(req, buf.data() + used, size - used, names[i], &e, next)
             : fuse_add_direntry(req, buf.data() + used, size - used, names[i], &e.attr, next);
    if (n > size - used) {
      break;
    }
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                bool plus) {
  if (ino == kControlDirId) {
    control_readdir(req, size, off, plus);
    return;
  }
  DirHandle& dir = *dir_of(fi);
  std::vector<char> buf(size);
  size_t used = 0;
  dir.seek(off);
  while (true) {
    const off_t here = dir.tell();
    auto next = dir.next();
    if (!next) {
      break;
    }
    if (ino == kRootInodeId && strcmp(next->name, kControlDirName) == 0) {
      continue;  // shadowed by the control directory, which listings do not show
    }
    char* at = buf.data() + used;
    const ssize_t n = plus ? add_plus_entry(req, ino, *next, at, size - used)
                           : add_plain_entry(req, *next, at, size - used);
    if (n == kNoRoom) {
      dir.seek(here);  // the next call starts with this entry
      break;
    }
    used += static_cast<size_t>(n);
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  fs_of(req).releasedir(dir_of(fi));
  fuse_reply_err(req, 0);
}

void release_handle(Filesystem& fs, fuse_ino_t ino, FileHandle* handle) {
  if (!handle->is_control) {
    passthrough::end_open(ino, handle->backing_id);
  }
  fs.release(handle);
}

// What the kernel may read an open of a dataset file from itself (fusefs/passthrough.h).
passthrough::Backing backing_for(const Filesystem& fs, const prefetch::OpenFile& file) {
  if (file.from_cache) {
    return passthrough::Backing::kCopy;
  }
  return fs.source_is_local(file.version) ? passthrough::Backing::kSource
                                          : passthrough::Backing::kNone;
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (fs_of(req).options().implicit_opens) {
    // --data-path no-open: from this answer on the kernel opens every file of the mount
    // without asking (fusefs/implicit_opens.h).
    fuse_reply_err(req, ENOSYS);
    return;
  }
  auto opened = fs_of(req).open(ino, fi->flags, fuse_req_ctx(req)->uid);
  if (!opened.is_ok()) {
    reply_status(req, opened.status());
    return;
  }
  FileHandle* handle = opened.value().handle;
  fi->fh = reinterpret_cast<uint64_t>(handle);
  fi->keep_cache = opened.value().keep_cache;
  // Control files are made at open and have no size: the kernel must ask for every read.
  fi->direct_io = handle->is_control;
  // Read-only: the kernel need not send FLUSH on every close.
  fi->noflush = 1;
  if (!handle->is_control) {
    const prefetch::OpenFile& file = handle->file;
    const auto pt = passthrough::begin_open(ino, file.fd.get(), backing_for(fs_of(req), file));
    handle->backing_id = pt.backing_id;
    if (pt.reads_source) {
      // The kernel reads the source for this open without us: its bytes count at the open,
      // whole (a trainer reads whole files), so the source's load stays in the stats. Before
      // the reply: once it is out, the file's RELEASE may free the handle at any moment.
      fs_of(req).count_passthrough_source(*handle);
    }
  }
  if (passthrough::reply_open(req, fi, handle->backing_id) != 0) {
    release_handle(fs_of(req), ino, handle);  // interrupted: no release will come
  }
}

// A pipe per FUSE worker, for reads of cached copies: the copy's pages are spliced into it
// first, so that a failed or short read of the copy is seen here, before anything is sent,
// and the reader can be answered from the source instead. (Handing the copy's fd to
// fuse_reply_data would let libfuse reply the error to the reader itself.)
struct CopyPipe {
  static constexpr size_t kPage = 4096;

  int r = -1;
  int w = -1;
  size_t capacity = 0;

  ~CopyPipe() { reset(); }

  void reset() {
    if (r >= 0) {
      close(r);
      close(w);
    }
    r = w = -1;
    capacity = 0;
  }

  // Ready for len bytes at off; false if this pipe cannot hold them. A pipe holds one page per
  // slot, and a read not aligned to a page touches one page more than its length says.
  bool ready(off_t off, size_t len) {
    if (r < 0) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        return false;
      }
      r = fds[0];
      w = fds[1];
      // Beyond the per-user pipe limit the kernel refuses to grow it: keep the default size,
      // which still takes the small reads.
      const int got = fcntl(w, F_SETPIPE_SZ, 1 << 20);
      const int size = got > 0 ? got : fcntl(w, F_GETPIPE_SZ);
      capacity = size > 0 ? static_cast<size_t>(size) : 0;
    }
    const size_t skew = static_cast<size_t>(off) % kPage;
    return (skew + len + kPage - 1) / kPage * kPage <= capacity;
  }

  // Moves up to len bytes of fd at off into the pipe; the count, or -errno. Never blocks: a
  // full pipe (EAGAIN) is an error of the pipe, not of the copy.
  ssize_t fill(int fd, off_t off, size_t len) {
    size_t total = 0;
    while (total < len) {
      loff_t pos = off + static_cast<off_t>(total);
      const ssize_t n =
          splice(fd, &pos, w, nullptr, len - total, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
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
    return ioctl(r, FIONREAD, &queued) == 0 && queued == 0;
  }
};

enum class CopyRead { kSent, kFailed, kNoPipe };

// Answers a read of a cached copy through the worker's pipe. kFailed, with nothing sent, if
// the copy could not give the bytes its version has: the caller reads the source instead.
CopyRead reply_from_copy(fuse_req_t req, FileHandle& file, size_t size, off_t off) {
  thread_local CopyPipe pipe;
  const auto file_size = static_cast<uint64_t>(file.file.version.size);
  const auto at = static_cast<uint64_t>(off);
  const size_t expected =
      at >= file_size ? 0 : static_cast<size_t>(std::min<uint64_t>(size, file_size - at));
  if (expected == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return CopyRead::kSent;
  }
  if (!pipe.ready(off, expected)) {
    return CopyRead::kNoPipe;
  }
  const ssize_t n = pipe.fill(file.read_fd.load(std::memory_order_acquire), off, expected);
  if (n != static_cast<ssize_t>(expected)) {
    pipe.reset();  // drop whatever part was spliced
    return n == -EAGAIN ? CopyRead::kNoPipe : CopyRead::kFailed;
  }
  fuse_bufvec buf = FUSE_BUFVEC_INIT(expected);
  buf.buf[0].flags = FUSE_BUF_IS_FD;
  buf.buf[0].fd = pipe.r;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  if (!pipe.empty()) {
    pipe.reset();
  }
  return CopyRead::kSent;
}

// Answers a read of a cached copy through a buffer, when no pipe can be had (pipe2 refused,
// EMFILE, or a pipe the kernel would not grow past an unprivileged user's limit). As through
// the pipe, kFailed with nothing sent if the copy could not give the bytes its version has:
// replying from the copy's fd instead would hand its error or short read to the reader.
CopyRead reply_copy_buffered(fuse_req_t req, FileHandle& file, size_t size, off_t off) {
  thread_local std::vector<char> buffer;
  const auto file_size = static_cast<uint64_t>(file.file.version.size);
  const auto at = static_cast<uint64_t>(off);
  const size_t expected =
      at >= file_size ? 0 : static_cast<size_t>(std::min<uint64_t>(size, file_size - at));
  if (buffer.size() < expected) {
    buffer.resize(expected);  // at most one read's size (max_read) per worker
  }
  const int fd = file.read_fd.load(std::memory_order_acquire);
  size_t got = 0;
  while (got < expected) {
    const ssize_t n = pread(fd, buffer.data() + got, expected - got, off + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return CopyRead::kFailed;
    }
    got += static_cast<size_t>(n);
  }
  fuse_reply_buf(req, buffer.data(), expected);
  return CopyRead::kSent;
}

void reply_read(fuse_req_t req, FileHandle& file, size_t size, off_t off) {
  if (file.is_control) {
    // A copy, not a pointer into the handle: once the kernel has the reply (inside writev),
    // it may send RELEASE, and another worker may free the handle before writev returns.
    const std::string& text = file.control_content;
    const size_t start = std::min(text.size(), static_cast<size_t>(off));
    const std::string chunk = text.substr(start, size);
    fuse_reply_buf(req, chunk.data(), chunk.size());
    return;
  }
  fs_of(req).count_read(file, size, static_cast<uint64_t>(off));
  std::optional<cachestore::DiskWatch::Op> watch;
  if (file.reading_copy.load(std::memory_order_acquire)) {
    watch.emplace(fs_of(req).watch_copy_read());
    CopyRead r = reply_from_copy(req, file, size, off);
    if (r == CopyRead::kNoPipe) {
      r = reply_copy_buffered(req, file, size, off);
    }
    if (r == CopyRead::kSent) {
      return;
    }
    if (r == CopyRead::kFailed) {
      // The rest comes from the source, at the version this reader has been reading: a slow
      // source is not a hung cache disk.
      watch.reset();
      Status switched = fs_of(req).read_source_instead(file);
      if (!switched.is_ok()) {
        reply_status(req, switched);
        return;
      }
    }
  }
  // From the source: through a buffer, read by the engine's guard, so that a hung source
  // cannot hold this reader in the kernel unkillably.
  auto data = fs_of(req).read_source(file, size, off);
  if (!data.is_ok()) {
    reply_status(req, data.status());
    return;
  }
  fuse_reply_buf(req, data.value().data(), data.value().size());
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

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  if (fi->fh == 0) {
    reply_implicit_read(req, ino, size, off);
    return;
  }
  reply_read(req, *file_of(fi), size, off);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t /*mode*/,
               fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  auto created = fs.create(parent, name, Caller{ctx->uid, ctx->pid});
  if (!created.is_ok()) {
    reply_status(req, created.status());
    return;
  }
  // No caching of an upload's name or attributes: it exists only while it is being written.
  fuse_entry_param e = make_entry(fs, created.value().entry.id, created.value().entry.attr);
  e.attr_timeout = 0;
  e.entry_timeout = 0;
  fi->fh = reinterpret_cast<uint64_t>(created.value().handle);
  fi->direct_io = 1;  // every write reaches the parser, in order, without the page cache
  if (fuse_reply_create(req, &e, fi) != 0) {
    fs.release(created.value().handle);  // interrupted: no release will come
  }
}

void op_write(fuse_req_t req, fuse_ino_t /*ino*/, const char* data, size_t size, off_t off,
              fuse_file_info* fi) {
  if (fi->fh == 0) {
    fuse_reply_err(req, kReadOnlyError);  // opened without asking (no-open): never an upload
    return;
  }
  Status written =
      fs_of(req).write(*file_of(fi), static_cast<uint64_t>(off), std::string_view(data, size));
  if (!written.is_ok()) {
    reply_status(req, written);
    return;
  }
  fuse_reply_write(req, size);
}

void op_flush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  if (fi->fh == 0) {
    // Opened without asking (no-open): ENOSYS stops FLUSH for the whole mount, saving a round
    // trip per close. The kernel sends no RELEASE either under no-open, so uploads then
    // publish only at fsync (the Python helper and `epochfs publish` call it; docs/design.md).
    fs_of(req).closes_unseen();
    fuse_reply_err(req, ENOSYS);
    return;
  }
  reply_status(req, fs_of(req).flush(*file_of(fi)));
}

// An upload is published at fsync, which reports its verdict whatever the data path (a close
// may not ask the daemon: see op_flush). Nothing else is written, so nothing else to sync.
void op_fsync(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* fi) {
  if (fi->fh == 0) {
    fuse_reply_err(req, 0);
    return;
  }
  reply_status(req, fs_of(req).sync(*file_of(fi)));
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (fi->fh == 0) {
    fuse_reply_err(req, 0);
    return;
  }
  release_handle(fs_of(req), ino, file_of(fi));
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t /*ino*/) {
  auto st = fs_of(req).statfs();
  if (!st.is_ok()) {
    reply_status(req, st.status());
    return;
  }
  fuse_reply_statfs(req, &st.value());
}

// size 0 asks for the length; otherwise reply with up to size bytes.
template <typename Fetch>
void reply_xattr(fuse_req_t req, size_t size, Fetch fetch) {
  std::vector<char> buf(size);
  auto n = fetch(size == 0 ? nullptr : buf.data(), size);
  if (!n.is_ok()) {
    reply_status(req, n.status());
  } else if (size == 0) {
    fuse_reply_xattr(req, n.value());
  } else {
    fuse_reply_buf(req, buf.data(), n.value());
  }
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  reply_xattr(req, size,
              [&](char* buf, size_t n) { return fs_of(req).getxattr(ino, name, buf, n); });
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  reply_xattr(req, size, [&](char* buf, size_t n) { return fs_of(req).listxattr(ino, buf, n); });
}

void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  reply_status(req, fs_of(req).access(ino, mask));
}

// Wraps an operation that replies: no exception may cross into libfuse's C code, and an
// allocation failure becomes ENOMEM for that request (every op replies only after its last
// allocation, so a throw always happens before the reply).
template <auto Op>
struct Guarded;

// The kernel interrupts a request whose reader got a signal (killed, most often): a worker
// waiting on the source for it stops (prefetch/source_guard.h), so the reader can go. Called
// by libfuse while req is alive, from the worker that read the INTERRUPT.
void on_interrupt(fuse_req_t req, void* data) {
  if (static_cast<prefetch::Cancel*>(data)->cancel(req)) {
    fs_of(req).source_guard().wake();
  }
}

// Each worker's: it outlives every request the worker serves, so a late interrupt finds it.
thread_local prefetch::Cancel t_cancel;

template <typename... Args, void (*Op)(fuse_req_t, Args...)>
struct Guarded<Op> {
  static void call(fuse_req_t req, Args... args) {
    t_cancel.begin(req);
    prefetch::Cancel::Scope scope(&t_cancel);
    fuse_req_interrupt_func(req, on_interrupt, &t_cancel);
    try {
      Op(req, args...);
    } catch (const std::bad_alloc&) {
      fuse_reply_err(req, ENOMEM);
    }
  }
};

// Every modifying operation ends here.
void reply_read_only(fuse_req_t req) { fuse_reply_err(req, kReadOnlyError); }

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops;
  memset(&ops, 0, sizeof(ops));
  ops.init = op_init;
  ops.lookup = Guarded<op_lookup>::call;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = Guarded<op_getattr>::call;
  ops.readlink = Guarded<op_readlink>::call;
  ops.opendir = Guarded<op_opendir>::call;
  ops.readdir = Guarded<op_readdir>::call;
  ops.readdirplus = Guarded<op_readdirplus>::call;
  ops.releasedir = Guarded<op_releasedir>::call;
  ops.open = Guarded<op_open>::call;
  ops.read = Guarded<op_read>::call;
  ops.release = Guarded<op_release>::call;
  ops.statfs = Guarded<op_statfs>::call;
  ops.getxattr = Guarded<op_getxattr>::call;
  ops.listxattr = Guarded<op_listxattr>::call;
  ops.access = Guarded<op_access>::call;
  // Modifying operations: each answers EROFS through reply_read_only.
  ops.setattr = [](fuse_req_t req, fuse_ino_t ino, struct stat*, int, fuse_file_info*) {
    if (is_upload(ino)) {
      // Writers of an order may truncate it or set its mode and times: nothing to keep.
      const struct stat st = control_attr(ino);
      fuse_reply_attr(req, &st, 0);
      return;
    }
    reply_read_only(req);
  };
  ops.mknod = [](fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { reply_read_only(req); };
  ops.mkdir = [](fuse_req_t req, fuse_ino_t, const char*, mode_t) { reply_read_only(req); };
  ops.unlink = [](fuse_req_t req, fuse_ino_t, const char*) { reply_read_only(req); };
  ops.rmdir = [](fuse_req_t req, fuse_ino_t, const char*) { reply_read_only(req); };
  ops.symlink = [](fuse_req_t req, const char*, fuse_ino_t, const char*) { reply_read_only(req); };
  ops.rename = [](fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
    reply_read_only(req);
  };
  ops.link = [](fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { reply_read_only(req); };
  // Writes and creates succeed only in the control directory (publishing an order); the
  // Filesystem answers EROFS everywhere else.
  ops.write = Guarded<op_write>::call;
  ops.create = Guarded<op_create>::call;
  ops.flush = Guarded<op_flush>::call;
  ops.fsync = Guarded<op_fsync>::call;
  ops.setxattr = [](fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
    reply_read_only(req);
  };
  ops.removexattr = [](fuse_req_t req, fuse_ino_t, const char*) { reply_read_only(req); };
  ops.fallocate = [](fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) {
    reply_read_only(req);
  };
  ops.copy_file_range = [](fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t,
                           fuse_file_info*, size_t, int) { reply_read_only(req); };
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& fuse_operations() {
  static const fuse_lowlevel_ops ops = make_operations();
  return ops;
}

void set_conn_info_opts(fuse_conn_info_opts* opts) { g_conn_opts = opts; }

}  // namespace epochfs::fusefs
