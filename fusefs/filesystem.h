// Filesystem: the read-only overlay of a source directory, as plain functions.
//
// This is the core the FUSE adapter (fuse_ops.cc) calls: it knows inode ids, paths and errno,
// but not the FUSE protocol, so it can be tested without a mount. Data reads go through the
// prefetch engine (the front door to the cache); metadata comes from the source directly.
//
// Every operation that would modify the tree answers EROFS from one place: kReadOnlyError.
//
// Thread-safety: all methods may be called concurrently from FUSE worker threads. The state
// that changes (the inode table, the open files and directories, the listings kept, the control
// files' snapshots, a verify under way) is in the members under "Mutable state", each locked
// inside or under its own mutex: leaf locks, never held together.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cachestore/root_dir.h"
#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "fusefs/control_dir.h"
#include "fusefs/dir_handle.h"
#include "fusefs/file_handle.h"
#include "fusefs/handle_table.h"
#include "fusefs/implicit_opens.h"
#include "fusefs/inode_table.h"
#include "fusefs/metrics.h"
#include "fusefs/request_counts.h"
#include "prefetch/engine.h"

namespace epochfs::fusefs {

// The errno for every modifying operation.
inline constexpr int kReadOnlyError = EROFS;

// Opens kept for reads without a handle (--data-path no-open), by default.
inline constexpr size_t kImplicitOpensKept = 256;

struct FilesystemOptions {
  double entry_timeout_s = 1.0;
  double attr_timeout_s = 1.0;
  double negative_timeout_s = 1.0;
  // The dataset never changes while mounted: keep every cached page and name.
  bool immutable = false;
  // --data-path no-open: the kernel sends no OPEN or RELEASE, reads come without a handle
  // (fusefs/implicit_opens.h) and control files are served from snapshots.
  bool implicit_opens = false;
  // Opens kept for reads without a handle: fds held at most.
  size_t implicit_opens_kept = kImplicitOpensKept;
  // The mount point and the source, as the metrics' labels.
  MountLabels labels;
  // Files and directories one user may hold open through the mount, and all users together:
  // each holds a descriptor or a listing in the daemon (--max-opens-per-user; the cap is the
  // readers' share of the open-files limit, fusefs/session.cc).
  uint64_t opens_per_user = 1024;
  uint64_t opens = 4096;
};

struct Entry {
  InodeId id;
  struct stat attr;
};

// Who sent a request (the kernel's word: fuse_req_ctx).
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;  // the calling thread; 0 if it is in another pid namespace
};

struct CreateResult {
  Entry entry;
  FileHandle* handle;  // owned by the Filesystem until release()
};

struct OpenResult {
  FileHandle* handle;  // owned by the Filesystem until release()
  // Pages the kernel cached at an earlier open are still valid.
  bool keep_cache;
};

class Filesystem {
 public:
  // cache may be null: the overlay then reads every file from the source.
  Filesystem(cachestore::RootDir source, const struct stat& root_st, FilesystemOptions options,
             std::unique_ptr<cachestore::CacheStore> cache = nullptr,
             prefetch::EngineOptions engine_options = {});

  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // Starts background threads (staging). Call after any fork, before serving.
  void start() { engine_.start(); }

  // The daemon's figures in Prometheus's text format (fusefs/metrics.h).
  std::string metrics() const;
  // The verifies run so far, for the stats and the metrics.
  VerifyFigures verify_figures() const;
  // How reads reach cached files now (fusefs/passthrough.h), for the stats and the metrics.
  static DataPathFigures data_path_figures();

  // The kernel's requests answered, by kind (the FUSE adapter counts them).
  RequestCounts& requests() { return requests_; }

  // After the session: see Engine::unmounted.
  void unmounted() { engine_.unmounted(); }

  // Looks name up in parent; on success the kernel holds one more reference to the result.
  // at_hand: only from attributes read within the timeout, never a call into the source (a
  // listing's entries: the listing does without the others' attributes); EAGAIN otherwise.
  // caller: the user asking (none: the daemon itself): whose view of a control file's
  // snapshot it gets (no-open), and with --data-path no-open a lookup of .epochfs/verify is
  // where a user who may not verify is refused (EACCES).
  cachestore::Result<Entry> lookup(InodeId parent, std::string_view name, bool at_hand = false,
                                   std::optional<uid_t> caller = std::nullopt);
  void forget(InodeId id, uint64_t n);
  // A batch of forgets is done: when the kernel has let go of most of what it held, returns
  // the memory freed to the system (malloc keeps it otherwise; docs/reliability.md L5).
  void forgotten();
  cachestore::Result<struct stat> getattr(InodeId id);
  cachestore::Result<std::string> readlink(InodeId id);
  // Handles returned by opendir and open stay owned by the Filesystem until releasedir and
  // release, or until it is destroyed (the kernel sends no release if the connection ends).
  // opener: the user the handle is charged to (none: not charged).
  cachestore::Result<DirHandle*> opendir(InodeId id, std::optional<uid_t> opener = std::nullopt);
  void releasedir(DirHandle* dir);
  // opener: the user opening it, whose streams the open may advance (prefetch/jobs.h), and
  // whom the handle is charged to (EMFILE past --max-opens-per-user), and who must be root or
  // the daemon's own user to open .epochfs/verify (else EACCES).
  cachestore::Result<OpenResult> open(InodeId id, int flags,
                                      std::optional<uid_t> opener = std::nullopt);
  void release(FileHandle* file);

  // The open a read without a file handle is served from (--data-path no-open).
  cachestore::Result<std::shared_ptr<ImplicitOpens::Lease>> implicit_open(
      InodeId id, uint64_t offset, std::optional<uid_t> opener = std::nullopt) {
    return implicit_.for_read(id, offset, opener);
  }

  size_t implicit_opens_kept() const { return implicit_.kept(); }
  // Without OPEN the kernel caches a control file's pages like any file's and reads no further
  // than its size. So with implicit opens every lookup of a control file gives a new node, a
  // snapshot whose content is made when its attributes or data are first asked for and then
  // kept until the kernel forgets the node: each open (a lookup, as the kernel keeps no entry
  // of a control file) sees content of its own time, read by read the same document.
  struct stat control_file_attr(InodeId id);
  std::string control_file_read(InodeId id, uint64_t offset, size_t size);
  // A new file in the control directory: an upload of an order (or of the manifest) into a
  // job of caller's (prefetch/jobs.h). EROFS anywhere else.
  cachestore::Result<CreateResult> create(InodeId parent, std::string_view name,
                                          const Caller& caller);
  // Data written to an upload; EROFS for any other file.
  cachestore::Status write(FileHandle& file, uint64_t offset, std::string_view data);
  // Thread closer closed one of its descriptors: if it is the writer's, an upload with bytes
  // in it is published now; EINVAL if it was refused (cut short, no usable entries), with the
  // reason in the log and in stats. An upload with no bytes yet waits, and so does one another
  // process closed (see the definition).
  cachestore::Status flush(FileHandle& file, pid_t closer);
  // The writer synced the file, or closed its last descriptor: an upload is published now,
  // empty or not; EINVAL if it was refused.
  cachestore::Status sync(FileHandle& file);

  // The kernel will no longer tell the daemon about closes (no-open stopped FLUSH, and sends
  // no RELEASE): an upload publishes only at fsync. Each later upload logs a warning once.
  void closes_unseen() { closes_unseen_.store(true, std::memory_order_relaxed); }

  // A read of file's cached copy failed: switches the open to the source at the same version
  // (once; later calls find it done) and reads size bytes at off from there, as read_source.
  cachestore::Result<std::string> read_source_instead(DataOpen& file, size_t size, off_t off);
  // size bytes at offset were requested from file; counts what was served.
  void count_read(const DataOpen& file, uint64_t size, uint64_t offset);

  // The kernel reads file's source file for its reader (passthrough): counted whole, now.
  void count_passthrough_source(const DataOpen& file) {
    engine_.count_source_read(file.file, static_cast<uint64_t>(file.file.version.size));
  }

  // size bytes of file's source at off, read so that a hung source cannot hold the reader
  // unkillably (prefetch/source_guard.h).
  cachestore::Result<std::string> read_source(const DataOpen& file, size_t size, off_t off) {
    return engine_.read_source(file.file, file.read_fd.load(std::memory_order_acquire), size, off);
  }

  // size bytes of a file read by blocks (prefetch/blocks.h) at off, for reader.
  cachestore::Result<std::string> read_blocks(const DataOpen& file, size_t size, off_t off,
                                              uid_t reader) {
    return engine_.read_blocks(file.file, size, off, reader);
  }

  // A read of such a file within one block with a ready copy (Engine::block_slice).
  std::optional<prefetch::Engine::BlockSlice> block_slice(const DataOpen& file, size_t size,
                                                          off_t off, uid_t reader) {
    return engine_.block_slice(file.file, size, off, reader);
  }

  void block_slice_done(const prefetch::Engine::BlockSlice& slice, bool read) {
    engine_.block_slice_done(slice, read);
  }

  // The guard of calls into the source; the FUSE layer wakes it when a request is interrupted.
  prefetch::SourceGuard& source_guard() { return engine_.source_guard(); }

  // Each request holds a ticket of it while served (prefetch/grace.h).
  prefetch::Grace& grace() { return engine_.grace(); }

  // Watches one read of a cached copy (a cache disk that stops answering is noticed).
  cachestore::DiskWatch::Op watch_copy_read() { return engine_.watch_copy_read(); }
  cachestore::Result<struct statvfs> statfs();
  cachestore::Result<size_t> getxattr(InodeId id, const char* name, char* buf, size_t size);
  cachestore::Result<size_t> listxattr(InodeId id, char* buf, size_t size);
  cachestore::Status access(InodeId id, int mask);

  const FilesystemOptions& options() const { return options_; }

  // True if a file of this version sits on the source root's own filesystem and that is a
  // local one (cachestore::is_local_fs): opening it again, as the kernel does for each
  // passthrough open, then costs no request to another machine. Network and FUSE sources,
  // and files on other filesystems mounted inside the source, are read the classic way.
  bool source_is_local(const cachestore::FileVersion& version) const {
    return local_source_dev_.has_value() && version.dev == *local_source_dev_;
  }

  const InodeTable& inodes() const { return inodes_; }

  // How pages the kernel cached for a node are dropped (the FUSE session's notification); set
  // before serving. Called from no request handler and with no lock held.
  using InvalidatePages = std::function<void(InodeId)>;

  void set_invalidate_pages(InvalidatePages invalidate) {
    invalidate_pages_ = std::move(invalidate);
  }

  // Run once, by the first request served: the kernel sends none before INIT is done (what
  // KernelReadahead::set waits for). Set before serving.
  void set_after_init(std::function<void()> after_init) {
    after_init_ = std::move(after_init);
    after_init_pending_.store(after_init_ != nullptr, std::memory_order_relaxed);
  }

  // Called by each request as it starts.
  void request_started() {
    if (after_init_pending_.load(std::memory_order_relaxed) &&
        after_init_pending_.exchange(false)) {
      after_init_();
    }
  }

  // Who may open .epochfs/verify: root, the daemon's own user, and the daemon itself (none).
  static bool may_verify(std::optional<uid_t> caller);

  prefetch::EngineStats engine_stats() const { return engine_.stats(); }

 private:
  cachestore::Result<std::string> path_of(InodeId id) const;
  // The listing of directory path: read through the guard, or with --immutable the one kept.
  cachestore::Result<std::shared_ptr<const Listing>> listing_of(const std::string& path);

  // f, a call into the source about path, through the engine's guard (no answer of our own).
  template <typename T>
  cachestore::Result<T> guarded(const std::string& path, std::function<cachestore::Result<T>()> f) {
    return engine_.source_guard().call<T>(path, false, std::move(f));
  }

  std::atomic<bool> closes_unseen_{false};
  std::atomic<bool> warned_closes_unseen_{false};

  cachestore::Result<OpenResult> open_control(InodeId id, int flags, std::optional<uid_t> opener);
  // Switches file to its source after a failed read of its copy (read_source_instead).
  cachestore::Status switch_to_source(DataOpen& file);
  // The content of control file id (stats, metrics, verify) now.
  // viewer: the user it is made for (control_dir.h, as_seen_by); none: everything.
  std::string control_content(InodeId id, std::optional<uid_t> viewer);
  // .epochfs/verify's document: from a run started now, or, if one is running, from that one
  // (waited for). Either way its damaged copies are dropped, from the kernel's page cache too.
  std::string verify_document() EXCLUDES(verify_mu_);
  // One verify, in a thread of its own at background priority, while the caller waits.
  std::string run_verify();

  // A verify under way; its document is set, then done, under verify_mu_.
  struct VerifyRun {
    std::string document;
    bool done = false;
    bool failed = false;  // out of memory: the waiters fail too
  };

  struct Snapshot {
    InodeId kind;                                // kStatsFileId, kVerifyFileId or kMetricsFileId
    std::shared_ptr<const std::string> content;  // made at the first getattr or read
    std::optional<uid_t> viewer;                 // who looked it up: whose view it shows
  };

  struct SnapshotView {
    InodeId kind = 0;
    std::shared_ptr<const std::string> content;  // null: no such snapshot
  };

  // open and opendir once the handle is charged.
  cachestore::Result<OpenResult> open_handle(InodeId id, int flags, std::optional<uid_t> opener);
  cachestore::Result<DirHandle*> open_listing(InodeId id);
  // Charges one open handle to opener (EMFILE past a limit); uncharge_open gives it back.
  cachestore::Status charge_open(std::optional<uid_t> opener);
  void uncharge_open(std::optional<uid_t> opener);

  // The entry a lookup of control node id answers (a snapshot's with implicit opens).
  Entry control_entry(InodeId id, std::optional<uid_t> viewer);
  // Snapshot id with its content, made now (outside snapshots_mu_) if it has none yet.
  SnapshotView snapshot(InodeId id) EXCLUDES(snapshots_mu_);

  // Dependencies.
  const cachestore::RootDir source_;
  prefetch::Engine engine_;
  // Constant data.
  const FilesystemOptions options_;
  const std::optional<uint64_t> local_source_dev_;  // see source_is_local

  // Mutable state (each locked inside; leaf locks, never held together).
  InodeTable inodes_;
  HandleTable<FileHandle> files_;
  HandleTable<DirHandle> dirs_;
  prefetch::UserLedger opens_;  // handles in files_ and dirs_, by user
  Listings listings_;           // with --immutable only
  std::atomic<InodeId> next_upload_id_{kUploadIdBase};
  std::atomic<InodeId> next_snapshot_id_{kSnapshotIdBase};
  cachestore::Mutex snapshots_mu_;
  std::unordered_map<InodeId, Snapshot> snapshots_ GUARDED_BY(snapshots_mu_);
  InvalidatePages invalidate_pages_;  // set before serving, constant after
  std::function<void()> after_init_;  // set before serving, constant after
  std::atomic<bool> after_init_pending_{false};
  cachestore::Mutex verify_mu_;
  cachestore::CondVar verify_done_{&verify_mu_};
  std::shared_ptr<VerifyRun> verify_run_ GUARDED_BY(verify_mu_);  // null: none running
  std::atomic<uint64_t> verify_runs_{0};                          // verifies run
  std::atomic<uint64_t> verify_shared_{0};  // opens of verify that shared a run under way
  RequestCounts requests_;
  // Last: its opens are released (into files_ and the engine) before anything else goes.
  ImplicitOpens implicit_{*this, options_.implicit_opens_kept};
};

}  // namespace epochfs::fusefs
