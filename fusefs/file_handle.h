// FileHandle: what the kernel holds as fuse_file_info::fh from open to release. It is one of
// three kinds, each with only its own state: an open of a dataset file (DataOpen), of a control
// file (ControlOpen), or a file being written into .epochfs/ (UploadOpen).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"
#include "prefetch/engine.h"

namespace epochfs::fusefs {

// An open of a dataset file, served from its cached copy or from its source. A failed read of
// the copy switches the open to the source at the same version (Filesystem::read_source_instead)
// while other workers may be reading it: read_fd and reading_copy are atomic, and the copy's fd
// stays open until release.
struct DataOpen {
  // Takes opened's content. A reference, moved from here only: when the handle's allocation
  // fails, no constructor runs and the caller still holds the open to close.
  explicit DataOpen(prefetch::OpenFile& opened)
      : file(std::move(opened)), read_fd(file.fd.get()), reading_copy(file.from_cache) {}

  prefetch::OpenFile file;
  // The fd reads are served from: file.fd, or after a failed read of the copy, source_fd.
  std::atomic<int> read_fd;
  std::atomic<bool> reading_copy;
  cachestore::Mutex fallback_mu;
  cachestore::UniqueFd source_fd GUARDED_BY(fallback_mu);
  bool copy_dropped GUARDED_BY(fallback_mu) = false;
  // The kernel's backing id when the kernel reads this open's cached copy itself
  // (fusefs/passthrough.h); 0 when reads come to the daemon.
  uint32_t backing_id = 0;
};

// An open of a control file (.epochfs/stats): its content, made at open.
struct ControlOpen {
  std::string content;
};

// A file being written into .epochfs/: the order or manifest it carries.
struct UploadOpen {
  UploadOpen(std::unique_ptr<prefetch::OrderUpload> order, std::optional<prefetch::ProcessRef> by)
      : upload(std::move(order)), writer(by) {}

  std::unique_ptr<prefetch::OrderUpload> upload;
  std::optional<prefetch::ProcessRef> writer;  // the process that created it, if known
  cachestore::Mutex mu;  // writes and flushes of one handle may come from two threads
};

struct FileHandle {
  template <typename Kind, typename... Args>
  explicit FileHandle(std::in_place_type_t<Kind> kind, Args&&... args)
      : open(kind, std::forward<Args>(args)...) {}

  DataOpen* data() { return std::get_if<DataOpen>(&open); }

  const ControlOpen* control() const { return std::get_if<ControlOpen>(&open); }

  UploadOpen* upload() { return std::get_if<UploadOpen>(&open); }

  std::variant<DataOpen, ControlOpen, UploadOpen> open;
  std::optional<uid_t> charged_to;  // the user whose open it is (Filesystem's ledger)
};

}  // namespace epochfs::fusefs
