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
#include "fusefs/fuse_reply.h"
#include "fusefs/passthrough.h"

namespace epochfs::fusefs {

namespace {

using cachestore::LogLevel;
using cachestore::Status;

struct fuse_conn_info_opts* g_conn_opts = nullptr;

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
  auto entry = fs.lookup(parent, name, false, fuse_req_ctx(req)->uid);
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
  auto dir = fs_of(req).opendir(ino, fuse_req_ctx(req)->uid);
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

void op_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  fs_of(req).releasedir(dir_of(fi));
  fuse_reply_err(req, 0);
}

void release_handle(Filesystem& fs, fuse_ino_t ino, FileHandle* handle) {
  if (const DataOpen* data = handle->data()) {
    passthrough::end_open(ino, data->backing_id);
  }
  fs.release(handle);
}

// What the kernel may read an open of a dataset file from itself (fusefs/passthrough.h).
passthrough::Backing backing_for(const Filesystem& fs, const prefetch::OpenFile& file) {
  if (file.blocks) {
    return passthrough::Backing::kNone;  // each read picks its blocks' copies: the daemon's
  }
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
  DataOpen* data = handle->data();
  // Control files are made at open and have no size: the kernel must ask for every read.
  fi->direct_io = data == nullptr;
  // Read-only: the kernel need not send FLUSH on every close.
  fi->noflush = 1;
  uint32_t backing_id = 0;
  if (data != nullptr) {
    const prefetch::OpenFile& file = data->file;
    const auto pt =
        passthrough::begin_open(ino, file.fd.get(), backing_for(fs_of(req), file), file.version);
    data->backing_id = backing_id = pt.backing_id;
    if (pt.direct) {
      fi->direct_io = 1;
      fi->keep_cache = 0;
    }
    if (pt.reads_source) {
      // The kernel reads the source for this open without us: its bytes count at the open,
      // whole (a trainer reads whole files), so the source's load stays in the stats. Before
      // the reply: once it is out, the file's RELEASE may free the handle at any moment.
      fs_of(req).count_passthrough_source(*data);
    }
  }
  if (passthrough::reply_open(req, fi, backing_id) != 0) {
    release_handle(fs_of(req), ino, handle);  // interrupted: no release will come
  }
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t /*mode*/,
               fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  auto created = fs.create(parent, name, Caller{ctx->uid, ctx->gid, ctx->pid});
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
  reply_status(req, fs_of(req).flush(*file_of(fi), fuse_req_ctx(req)->pid));
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
template <auto Op, Request kind = Request::kOther>
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

template <typename... Args, void (*Op)(fuse_req_t, Args...), Request kind>
struct Guarded<Op, kind> {
  static void call(fuse_req_t req, Args... args) {
    fs_of(req).requests().count(kind);
    fs_of(req).request_started();
    // The ids this request reads from the inode table, the registry or a handle are not handed
    // out again for other paths until it is answered.
    const prefetch::Grace::Ticket ticket(fs_of(req).grace());
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

// Python's open() asks whether each file it opens is a terminal (isatty(): TCGETS). Answered
// here, not by libfuse, so that the stats count it: it is one of an open's round trips.
void op_ioctl(fuse_req_t req, fuse_ino_t /*ino*/, unsigned int /*cmd*/, void* /*arg*/,
              fuse_file_info* /*fi*/, unsigned /*flags*/, const void* /*in_buf*/,
              size_t /*in_bufsz*/, size_t /*out_bufsz*/) {
  fuse_reply_err(req, ENOTTY);
}

// Every modifying operation ends here.
void reply_read_only(fuse_req_t req) { fuse_reply_err(req, kReadOnlyError); }

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops;
  memset(&ops, 0, sizeof(ops));
  ops.init = op_init;
  ops.lookup = Guarded<op_lookup, Request::kLookup>::call;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = Guarded<op_getattr, Request::kGetattr>::call;
  ops.readlink = Guarded<op_readlink>::call;
  ops.opendir = Guarded<op_opendir>::call;
  ops.readdir = Guarded<op_readdir>::call;
  ops.readdirplus = Guarded<op_readdirplus>::call;
  ops.releasedir = Guarded<op_releasedir>::call;
  ops.open = Guarded<op_open, Request::kOpen>::call;
  ops.read = Guarded<op_read, Request::kRead>::call;
  ops.release = Guarded<op_release, Request::kRelease>::call;
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
  ops.flush = Guarded<op_flush, Request::kFlush>::call;
  ops.ioctl = Guarded<op_ioctl, Request::kIoctl>::call;
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
