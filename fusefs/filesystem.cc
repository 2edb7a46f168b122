#include "fusefs/filesystem.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstring>

#include "cachestore/fs_type.h"
#include "cachestore/log.h"
#include "cachestore/path.h"
#include "fusefs/control_dir.h"
#include "fusefs/passthrough.h"

namespace epochfs::fusefs {

using cachestore::Result;
using cachestore::Status;

namespace {

std::optional<uint64_t> local_dev(const cachestore::RootDir& root, const struct stat& root_st) {
  auto type = root.fs_type();
  if (!type.is_ok() || !cachestore::is_local_fs(type.value())) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(root_st.st_dev);
}

// The mount's data path decides how the engine serves files read by blocks.
prefetch::EngineOptions with_data_path(prefetch::EngineOptions options) {
  options.kernel_reads = passthrough::active;
  return options;
}

}  // namespace

Filesystem::Filesystem(cachestore::RootDir source, const struct stat& root_st,
                       FilesystemOptions options, std::unique_ptr<cachestore::CacheStore> cache,
                       prefetch::EngineOptions engine_options)
    : source_(std::move(source)),
      engine_(source_, std::move(cache), with_data_path(std::move(engine_options))),
      options_(options),
      local_source_dev_(local_dev(source_, root_st)),
      inodes_(root_st, engine_.registry()),
      opens_("open files and directories", "--max-opens-per-user", options.opens_per_user,
             "the readers' share of the daemon's open-files limit", options.opens, EMFILE) {}

Status Filesystem::charge_open(std::optional<uid_t> opener) {
  return opener ? opens_.charge(*opener, 1) : Status::ok();
}

void Filesystem::uncharge_open(std::optional<uid_t> opener) {
  if (opener) {
    opens_.release(*opener, 1);
  }
}

namespace {

// A node the kernel holds whose source path is gone was renamed or deleted in the source.
// ESTALE makes the VFS look the path up afresh (LOOKUP_REVAL) instead of failing at once, so
// a renamed directory's files are found under the new name and a deleted file gets ENOENT.
Status stale_if_gone(Status status) {
  if (status.error_code() == ENOENT) {
    return Status::error(ESTALE, status.context());
  }
  return status;
}

template <typename T>
Result<T> stale_if_gone(Result<T> result) {
  if (result.error_code() == ENOENT) {
    return stale_if_gone(result.status());
  }
  return result;
}

// An attribute value (or list) read into a string, given to the caller's buffer: with size 0,
// only its length (what getxattr(2) answers when asked for the size).
Result<size_t> copy_out(Result<std::string> data, char* buf, size_t size) {
  if (!data.is_ok()) {
    return data.status();
  }
  if (size != 0) {
    memcpy(buf, data.value().data(), data.value().size());
  }
  return data.value().size();
}

// For InodeTable::add_reference: whether another name in the source still leads to the file
// st describes (a hard link), so that one node may serve both names. A stat, asked only when
// an unchanged file is looked up under a name other than its node's (see add_reference).
InodeTable::NamesFile names_of(prefetch::Engine& engine, const cachestore::RootDir& source,
                               const struct stat& st) {
  return [&engine, &source, &st](const std::string& other) {
    auto other_st = engine.source_guard().call<struct stat>(
        other, false, [&source, other] { return source.stat_at(other); });
    return other_st.is_ok() && other_st.value().st_dev == st.st_dev &&
           other_st.value().st_ino == st.st_ino;
  };
}

}  // namespace

Result<std::string> Filesystem::path_of(InodeId id) const {
  auto path = inodes_.path_of(id);
  if (!path) {
    // The kernel named a node it had forgotten: a protocol bug, but never worth a crash.
    return Status::error(ESTALE, "inode " + std::to_string(id));
  }
  return std::move(*path);
}

Result<Entry> Filesystem::lookup(InodeId parent, std::string_view name, bool at_hand,
                                 std::optional<uid_t> caller) {
  if (auto control = control_lookup(parent, name)) {
    if (*control == kVerifyFileId && options_.implicit_opens && !may_verify(caller)) {
      // No OPEN will come: each reader of a control file looks it up first (control_entry).
      return Status::error(EACCES, "lookup .epochfs/verify");
    }
    return control_entry(*control, caller);
  }
  if (is_control(parent)) {
    return Status::error(ENOENT, std::string(name));
  }
  if (!cachestore::is_valid_name(name)) {
    return Status::error(name.size() > NAME_MAX ? ENAMETOOLONG : ENOENT, std::string(name));
  }
  auto dir = path_of(parent);
  if (!dir.is_ok()) {
    return dir.status();
  }
  std::string path = cachestore::join_path(dir.value(), name);
  if (auto fresh = engine_.fresh_attributes(path)) {
    return Entry{inodes_.add_reference(*fresh, path, names_of(engine_, source_, *fresh)), *fresh};
  }
  if (at_hand) {
    return Status::error(EAGAIN, path);
  }
  auto st = engine_.source_attributes(path);
  if (!st.is_ok()) {
    return st.status();
  }
  const InodeId id =
      inodes_.add_reference(st.value(), path, names_of(engine_, source_, st.value()));
  return Entry{id, st.value()};
}

void Filesystem::forget(InodeId id, uint64_t n) {
  if (is_control(id)) {
    // Control nodes live as long as the mount; a snapshot only as long as the kernel's node.
    cachestore::MutexLock lock(snapshots_mu_);
    snapshots_.erase(id);
    return;
  }
  if (!inodes_.forget(id, n)) {
    cachestore::log(cachestore::LogLevel::kWarning, "forget of unknown inode %llu",
                    static_cast<unsigned long long>(id));
  }
}

void Filesystem::forgotten() {
  // FORGET has no reply to carry ENOMEM, and the shrink is only a saving: out of memory, skip it.
  try {
    if (inodes_.shrink_if_mostly_forgotten()) {
      malloc_trim(0);
    }
  } catch (const std::bad_alloc&) {
  }
}

Result<struct stat> Filesystem::getattr(InodeId id) {
  if (is_control(id)) {
    return control_file_attr(id);
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  // Trusted as a lookup trusts them: a trainer's fstat() after open comes here whenever the
  // kernel's attributes lapsed, ~15% of its opens, and each was a round trip to the source.
  if (auto fresh = engine_.fresh_attributes(path.value())) {
    return *fresh;
  }
  return stale_if_gone(engine_.source_attributes(path.value()));
}

Result<std::string> Filesystem::readlink(InodeId id) {
  if (is_control(id)) {
    return Status::error(EINVAL, "readlink");
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  return stale_if_gone(guarded<std::string>(
      path.value(), [this, p = path.value()] { return source_.readlink_at(p); }));
}

Result<DirHandle*> Filesystem::opendir(InodeId id, std::optional<uid_t> opener) {
  if (is_control(id)) {
    return id == kControlDirId ? nullptr : Result<DirHandle*>(Status::error(ENOTDIR, "opendir"));
  }
  if (Status charged = charge_open(opener); !charged.is_ok()) {
    return charged;
  }
  auto dir = open_listing(id);
  if (!dir.is_ok()) {
    uncharge_open(opener);
    return dir;
  }
  dir.value()->charged_to = opener;
  return dir;
}

Result<DirHandle*> Filesystem::open_listing(InodeId id) {
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  auto listing = listing_of(path.value());
  if (!listing.is_ok()) {
    return stale_if_gone(listing.status());
  }
  auto dir = std::unique_ptr<DirHandle>(
      new (std::nothrow) DirHandle(std::move(listing).value(), std::move(path).value()));
  if (!dir) {
    return Status::error(ENOMEM, "opendir");
  }
  return dirs_.add(std::move(dir));
}

Result<std::shared_ptr<const Listing>> Filesystem::listing_of(const std::string& path) {
  // An immutable dataset's listing never changes: the one read first is served from then on,
  // during an outage too.
  if (options_.immutable) {
    if (auto known = listings_.find(path)) {
      return known;
    }
  }
  auto listing = guarded<std::shared_ptr<const Listing>>(
      path, [this, path]() -> Result<std::shared_ptr<const Listing>> {
        auto read = Listing::read(source_, path);
        if (!read.is_ok()) {
          return read.status();
        }
        return std::make_shared<const Listing>(std::move(read).value());
      });
  if (listing.is_ok() && options_.immutable) {
    listings_.keep(path, listing.value());
  }
  return listing;
}

void Filesystem::releasedir(DirHandle* dir) {
  if (dir != nullptr) {
    uncharge_open(dir->charged_to);
    dirs_.remove(dir);
  }
}

void Filesystem::release(FileHandle* file) {
  if (file->upload() != nullptr) {
    try {
      (void)sync(*file);  // a writer that never flushed (killed) still gets its verdict logged
    } catch (const std::bad_alloc&) {
      // Out of memory while publishing: the order is lost, the handle must still go.
      cachestore::log(cachestore::LogLevel::kError, "an order was not published: out of memory");
    }
  } else if (DataOpen* data = file->data()) {
    engine_.close_file(data->file);
  }
  uncharge_open(file->charged_to);
  files_.remove(file);
}

Result<std::string> Filesystem::read_source_instead(DataOpen& file, size_t size, off_t off) {
  if (Status switched = switch_to_source(file); !switched.is_ok()) {
    return switched;
  }
  return read_source(file, size, off);
}

Status Filesystem::switch_to_source(DataOpen& file) {
  {
    cachestore::MutexLock lock(file.fallback_mu);
    if (!file.reading_copy.load(std::memory_order_acquire)) {
      return Status::ok();  // another worker switched it already
    }
    if (!file.copy_dropped) {
      engine_.drop_failed_copy(file.file);  // once, however many workers met the failure
      file.copy_dropped = true;
    }
  }
  // Opened without fallback_mu: a guarded call may wait --source-timeout and --outage-wait,
  // and no lock is held across a call into the source (docs/design.md).
  auto fd = engine_.source_instead_of_copy(file.file);
  if (!fd.is_ok()) {
    return fd.status();
  }
  cachestore::MutexLock lock(file.fallback_mu);
  if (!file.reading_copy.load(std::memory_order_acquire)) {
    return Status::ok();  // another worker switched first; this fd closes here
  }
  // The copy's fd stays open until release: a worker may still be reading from it.
  file.source_fd = std::move(fd).value();
  file.read_fd.store(file.source_fd.get(), std::memory_order_release);
  file.reading_copy.store(false, std::memory_order_release);
  return Status::ok();
}

void Filesystem::count_read(const DataOpen& file, uint64_t size, uint64_t offset) {
  const auto file_size = static_cast<uint64_t>(file.file.version.size);
  engine_.count_read(file.file, offset >= file_size ? 0 : std::min(size, file_size - offset));
}

Result<OpenResult> Filesystem::open(InodeId id, int flags, std::optional<uid_t> opener) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)) != 0) {
    return Status::error(kReadOnlyError, "open for writing");
  }
  if (Status charged = charge_open(opener); !charged.is_ok()) {
    return charged;
  }
  auto opened = open_handle(id, flags, opener);
  if (!opened.is_ok()) {
    uncharge_open(opener);
    return opened;
  }
  opened.value().handle->charged_to = opener;
  return opened;
}

Result<OpenResult> Filesystem::open_handle(InodeId id, int flags, std::optional<uid_t> opener) {
  if (is_control(id)) {
    return open_control(id, flags, opener);
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  auto file = engine_.open_file(path.value(), opener);
  if (!file.is_ok()) {
    if (file.error_code() == EACCES && geteuid() == 0) {
      // Root is refused by permissions only where the server maps it to nobody.
      cachestore::log(cachestore::LogLevel::kWarning,
                      "the source refused root: %s (an NFS export with root_squash? mount as a "
                      "user who can read the data)",
                      file.status().to_string().c_str());
    }
    return stale_if_gone(file.status());
  }
  const bool unchanged = inodes_.note_version(id, file.value().version);
  auto handle = std::unique_ptr<FileHandle>(
      new (std::nothrow) FileHandle(std::in_place_type<DataOpen>, file.value()));
  if (!handle) {
    engine_.close_file(file.value());  // no constructor ran: the open is still here
    return Status::error(ENOMEM, "open");
  }
  FileHandle* added = files_.try_add(handle);
  if (added == nullptr) {
    engine_.close_file(handle->data()->file);  // unpins the copy: it must stay evictable
    return Status::error(ENOMEM, "open");
  }
  return OpenResult{added, options_.immutable || unchanged};
}

Result<struct statvfs> Filesystem::statfs() {
  return guarded<struct statvfs>("", [this] { return source_.statfs(); });
}

Result<size_t> Filesystem::getxattr(InodeId id, const char* name, char* buf, size_t size) {
  if (is_control(id)) {
    return Status::error(ENODATA, "getxattr");
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  // Into a buffer of the call's own: an abandoned call may still write after we returned.
  auto value = guarded<std::string>(
      path.value(), [this, p = path.value(), n = std::string(name), size]() -> Result<std::string> {
        std::string data(size, '\0');
        auto got = source_.getxattr_at(p, n.c_str(), size == 0 ? nullptr : data.data(), size);
        if (!got.is_ok()) {
          return got.status();
        }
        data.resize(size == 0 ? got.value() : std::min(got.value(), size));
        return data;
      });
  return copy_out(std::move(value), buf, size);
}

Result<size_t> Filesystem::listxattr(InodeId id, char* buf, size_t size) {
  if (is_control(id)) {
    return size_t{0};
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  auto names =
      guarded<std::string>(path.value(), [this, p = path.value(), size]() -> Result<std::string> {
        std::string data(size, '\0');
        auto got = source_.listxattr_at(p, size == 0 ? nullptr : data.data(), size);
        if (!got.is_ok()) {
          return got.status();
        }
        data.resize(size == 0 ? got.value() : std::min(got.value(), size));
        return data;
      });
  return copy_out(std::move(names), buf, size);
}

Status Filesystem::access(InodeId id, int mask) {
  if (id == kControlDirId) {
    return Status::ok();  // orders are written into it
  }
  if (is_control(id)) {
    return (mask & W_OK) != 0 ? Status::error(kReadOnlyError, "access for writing") : Status::ok();
  }
  auto path = path_of(id);
  if (!path.is_ok()) {
    return path.status();
  }
  if ((mask & W_OK) != 0) {
    // As on a read-only mount (access(2)): files, directories and links cannot be written, but
    // writing to a FIFO, socket or device changes no file, so its modes decide.
    auto st = engine_.source_attributes(path.value());
    if (!st.is_ok()) {
      return stale_if_gone(st.status());
    }
    const mode_t type = st.value().st_mode & S_IFMT;
    if (type == S_IFREG || type == S_IFDIR || type == S_IFLNK) {
      return Status::error(kReadOnlyError, "access for writing");
    }
  }
  auto allowed = guarded<bool>(path.value(), [this, p = path.value(), mask]() -> Result<bool> {
    Status st = source_.access_at(p, mask);
    if (!st.is_ok()) {
      return st;
    }
    return true;
  });
  return stale_if_gone(allowed.status());
}

}  // namespace epochfs::fusefs
