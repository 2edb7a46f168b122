// FileRegistry: dense ids for source files, and the last version seen of each.
//
// Owner: the Engine. Every file the mount opens or looks up gets a FileId for the life of the
// mount (ids are never reused, so the cache index and, later, the schedule can use them as
// array indices). The registry also remembers the attributes last read from the source, with
// when they were read: an open within the attribute timeout may trust them instead of asking
// the source again (one round trip less on network storage).
//
// Thread-safety: all methods lock mu_ (a leaf lock) for memory work only.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cachestore/eviction_policy.h"
#include "cachestore/file_version.h"
#include "cachestore/sync.h"

namespace epochfs::prefetch {

using cachestore::FileId;
using cachestore::FileVersion;

class FileRegistry {
 public:
  // The id of path, assigned on first use.
  FileId id_of(const std::string& path);

  // Records the version of id read from the source at now_ns.
  void observe(FileId id, const FileVersion& version, int64_t now_ns);

  // The version observed at or after since_ns, if any.
  std::optional<FileVersion> observed_since(FileId id, int64_t since_ns) const;

  // The path of id; empty if id was never handed out.
  std::string path_of(FileId id) const;

  size_t size() const;

 private:
  struct Record {
    std::string path;
    FileVersion seen;
    int64_t seen_at_ns = 0;
  };

  mutable cachestore::Mutex mu_;
  // A deque never moves its elements, so the string_view keys stay valid.
  std::deque<Record> records_ GUARDED_BY(mu_);
  std::unordered_map<std::string_view, FileId> ids_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
