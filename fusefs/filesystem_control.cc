// Filesystem, continued: the control directory's files (.epochfs/stats and the others: a
// snapshot per open, or per read with no-open) and order uploads (a file written into
// .epochfs/ and published at its flush or fsync).
#include <errno.h>
#include <unistd.h>

#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "cachestore/log.h"
#include "cachestore/path.h"
#include "fusefs/control_dir.h"
#include "fusefs/filesystem.h"
#include "fusefs/passthrough.h"
#include "fusefs/uring_transport.h"

namespace epochfs::fusefs {

using cachestore::Result;
using cachestore::Status;

bool Filesystem::may_verify(std::optional<uid_t> caller) {
  return !caller || *caller == 0 || *caller == ::getuid();
}

Result<OpenResult> Filesystem::open_control(InodeId id, int /*flags*/,
                                            std::optional<uid_t> opener) {
  if (!is_control_file(id)) {
    return Status::error(EISDIR, "open .epochfs");
  }
  if (id == kVerifyFileId && !may_verify(opener)) {
    // Each verify reads the whole cache: not for every user of a shared mount to start.
    return Status::error(EACCES, "open .epochfs/verify");
  }
  auto handle = std::make_unique<FileHandle>(std::in_place_type<ControlOpen>,
                                             ControlOpen{control_content(id, opener)});
  return OpenResult{files_.add(std::move(handle)), false};
}

std::string Filesystem::control_content(InodeId id, std::optional<uid_t> viewer) {
  if (id == kStatsFileId || id == kMetricsFileId) {
    prefetch::EngineStats stats = engine_.stats();
    if (viewer) {
      stats = as_seen_by(std::move(stats), *viewer);
    }
    if (id == kMetricsFileId) {
      return metrics_text(stats, data_path_figures(), options_.labels, verify_figures(),
                          requests_.figures());
    }
    return stats_json(stats, source_.path(), ::getpid(), inodes_.size(), data_path_figures(),
                      options_.implicit_opens, verify_figures(), requests_.figures());
  }
  return verify_document();
}

std::string Filesystem::verify_document() {
  auto fresh = std::make_shared<VerifyRun>();
  std::shared_ptr<VerifyRun> run;
  {
    cachestore::MutexLock lock(verify_mu_);
    if (!verify_run_) {
      verify_run_ = fresh;
    }
    run = verify_run_;
  }
  if (run != fresh) {
    // One at a time: a second reader of the whole cache would only slow the first, and every
    // reader of the mount with them. This one's document is the running one's.
    verify_shared_.fetch_add(1, std::memory_order_relaxed);
    cachestore::MutexLock lock(verify_mu_);
    while (!run->done) {
      verify_done_.wait();
    }
    if (run->failed) {
      throw std::bad_alloc();
    }
    return run->document;
  }
  verify_runs_.fetch_add(1, std::memory_order_relaxed);
  std::string document;
  bool failed = false;
  try {
    document = run_verify();
  } catch (const std::bad_alloc&) {
    failed = true;
  }
  {
    cachestore::MutexLock lock(verify_mu_);
    run->document = std::move(document);  // read only once done, and never changed again
    run->failed = failed;
    run->done = true;
    verify_run_.reset();
  }
  verify_done_.notify_all();
  if (failed) {
    throw std::bad_alloc();
  }
  return run->document;
}

std::string Filesystem::run_verify() {
  cachestore::VerifyReport report;
  std::vector<InodeId> nodes;
  bool failed = false;
  const auto work = [&] {
    try {
      report = engine_.verify_cache();
      for (FileId id : report.dropped) {
        const auto copy = engine_.copy_of(id);
        if (auto node = copy ? inodes_.node_of(copy->file, copy->version) : std::nullopt) {
          nodes.push_back(*node);
        }
      }
    } catch (const std::bad_alloc&) {
      failed = true;
      return;
    }
    // Pages the kernel read from a dropped copy would keep serving its damaged bytes (the
    // file's version did not change, so the next open keeps them). Dropped before the
    // document is out, so that a read after it gets the source's bytes. Not from a request
    // handler, and with no lock held: the kernel may wait on a page a READ of that file
    // holds, which another worker answers.
    for (InodeId node : nodes) {
      implicit_.drop(node);  // no-open: a read past offset 0 would reuse the damaged copy's open
      if (invalidate_pages_) {
        invalidate_pages_(node);
      }
    }
  };
  try {
    std::thread runner([&work] {
      // Background work, and nothing else runs on this thread (cachestore/sync.h).
      cachestore::name_this_thread("epochfs-verify");
      cachestore::lower_this_thread_priority();
      work();
    });
    runner.join();
  } catch (const std::system_error&) {
    work();  // no thread to be had: in this worker, at its priority
  }
  if (failed) {
    throw std::bad_alloc();
  }
  return verify_json(report, engine_.stats().cache_enabled);
}

Entry Filesystem::control_entry(InodeId id, std::optional<uid_t> viewer) {
  if (!options_.implicit_opens || !is_control_file(id)) {
    return Entry{id, control_attr(id)};
  }
  const InodeId snapshot = next_snapshot_id_.fetch_add(1, std::memory_order_relaxed);
  {
    cachestore::MutexLock lock(snapshots_mu_);
    snapshots_.emplace(snapshot, Snapshot{id, nullptr, viewer});
  }
  struct stat st = control_attr(id);
  st.st_ino = snapshot;
  return Entry{snapshot, st};
}

Filesystem::SnapshotView Filesystem::snapshot(InodeId id) {
  InodeId kind;
  std::optional<uid_t> viewer;
  {
    cachestore::MutexLock lock(snapshots_mu_);
    auto it = snapshots_.find(id);
    if (it == snapshots_.end()) {
      return SnapshotView{};
    }
    if (it->second.content) {
      return SnapshotView{it->second.kind, it->second.content};
    }
    kind = it->second.kind;
    viewer = it->second.viewer;
  }
  // Made without the lock: verify hashes the whole cache, and FORGET, LOOKUP and GETATTR of
  // every other control node take the lock.
  auto made = std::make_shared<const std::string>(control_content(kind, viewer));
  cachestore::MutexLock lock(snapshots_mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) {
    return SnapshotView{kind, made};  // forgotten meanwhile
  }
  if (!it->second.content) {
    it->second.content = std::move(made);  // the first one made is the one every read sees
  }
  return SnapshotView{kind, it->second.content};
}

struct stat Filesystem::control_file_attr(InodeId id) {
  const SnapshotView snap = snapshot(id);
  if (!snap.content) {
    return control_attr(id);
  }
  struct stat st = control_attr(snap.kind);
  st.st_ino = id;
  st.st_size = static_cast<off_t>(snap.content->size());
  return st;
}

std::string Filesystem::control_file_read(InodeId id, uint64_t offset, size_t size) {
  const SnapshotView snap = snapshot(id);
  if (!snap.content) {
    return std::string();
  }
  const std::string& text = *snap.content;
  return offset >= text.size() ? std::string() : text.substr(offset, size);
}

std::string Filesystem::metrics() const {
  return metrics_text(engine_.stats(), data_path_figures(), options_.labels, verify_figures(),
                      requests_.figures());
}

DataPathFigures Filesystem::data_path_figures() {
  return DataPathFigures{passthrough::active(),
                         passthrough::why_not(),
                         passthrough::opens(),
                         passthrough::source_opens(),
                         passthrough::backing_files(),
                         uring::active(),
                         uring::why_not(),
                         uring::ring_requests()};
}

VerifyFigures Filesystem::verify_figures() const {
  return VerifyFigures{verify_runs_.load(std::memory_order_relaxed),
                       verify_shared_.load(std::memory_order_relaxed)};
}

Result<CreateResult> Filesystem::create(InodeId parent, std::string_view name,
                                        const Caller& caller) {
  if (parent != kControlDirId) {
    return Status::error(kReadOnlyError, "create");
  }
  if (!cachestore::is_valid_name(name)) {
    return Status::error(name.size() > NAME_MAX ? ENAMETOOLONG : EINVAL,
                         "create .epochfs/" + std::string(name));
  }
  if (control_lookup(parent, name)) {
    return Status::error(EEXIST, "create .epochfs/" + std::string(name));
  }
  if (closes_unseen_.load(std::memory_order_relaxed) &&
      !warned_closes_unseen_.exchange(true, std::memory_order_relaxed)) {
    cachestore::log(cachestore::LogLevel::kWarning,
                    "with --data-path no-open the kernel does not tell the daemon when a file in "
                    ".epochfs/ is closed: publish with fsync (epochfs publish and the Python "
                    "helper do) or with --shuffle-file; a plain cp or shell redirection does not "
                    "publish");
  }
  if (Status charged = charge_open(caller.uid); !charged.is_ok()) {
    return charged;
  }
  auto publisher = prefetch::Publisher::of(caller.uid, caller.gid, caller.pid);
  const auto writer = publisher.process;
  auto upload = engine_.begin_upload(name == kManifestName ? prefetch::OrderUpload::Kind::kManifest
                                                           : prefetch::OrderUpload::Kind::kOrder,
                                     std::move(publisher));
  auto handle =
      std::make_unique<FileHandle>(std::in_place_type<UploadOpen>, std::move(upload), writer);
  handle->charged_to = caller.uid;
  const InodeId id = next_upload_id_.fetch_add(1, std::memory_order_relaxed);
  return CreateResult{Entry{id, control_attr(id)}, files_.add(std::move(handle))};
}

Status Filesystem::write(FileHandle& file, uint64_t offset, std::string_view data) {
  UploadOpen* upload = file.upload();
  if (upload == nullptr) {
    return Status::error(kReadOnlyError, "write");
  }
  cachestore::MutexLock lock(upload->mu);
  return upload->upload->write(offset, data);
}

namespace {

// Publishes file's upload (with its mu held): EINVAL if the order was refused.
Status publish_upload(UploadOpen& file) {
  const auto& report = file.upload->finish();
  return report.ok ? Status::ok() : Status::error(EINVAL, "publish: " + report.message);
}

}  // namespace

Status Filesystem::flush(FileHandle& handle, pid_t closer) {
  UploadOpen* upload = handle.upload();
  if (upload == nullptr) {
    return Status::ok();
  }
  UploadOpen& file = *upload;
  // Every process the writer starts inherits its descriptors (a shell's command substitution,
  // `(echo '#epoch 3'; shuf list) > .epochfs/order`) and closes them as it ends, before the
  // writer is done: only the writer's own closes publish. Others' wait for the release.
  if (file.writer && prefetch::process_of(closer) != file.writer) {
    return Status::ok();
  }
  cachestore::MutexLock lock(file.mu);
  // A shell redirection (`echo f0 > .epochfs/order`) opens the file, moves the descriptor onto
  // stdout and closes the one it opened before any byte is written. Publishing at that close
  // would refuse an empty order and turn the writes away; an empty upload is published at
  // release instead, so a truly empty order is refused without an error in its close.
  if (!file.upload->started()) {
    return Status::ok();
  }
  return publish_upload(file);
}

Status Filesystem::sync(FileHandle& file) {
  UploadOpen* upload = file.upload();
  if (upload == nullptr) {
    return Status::ok();
  }
  cachestore::MutexLock lock(upload->mu);
  return publish_upload(*upload);
}

}  // namespace epochfs::fusefs
