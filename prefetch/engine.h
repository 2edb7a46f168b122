// Engine: the front door of the data path, between the FUSE layer and the cache store.
//
// fusefs asks the engine for a file's data and never touches the cache directly, so that
// "wait for the copy in flight", progress tracking and staging each live in one place.
// At this stage the engine opens the source file itself; the cache store and the prefetch
// planner plug in behind this same interface.
//
// Thread-safety: all methods may be called concurrently from FUSE worker threads.
#pragma once

#include <sys/stat.h>

#include <string>

#include "cachestore/root_dir.h"
#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::prefetch {

// A file opened for reading, with the attributes of the version that fd reads.
struct OpenFile {
  cachestore::UniqueFd fd;
  struct stat st;
};

class Engine {
 public:
  // source must outlive the engine.
  explicit Engine(const cachestore::RootDir& source) : source_(source) {}

  // Opens a regular file for reading. EISDIR/EINVAL for anything that is not a regular file.
  cachestore::Result<OpenFile> open_file(const std::string& rel_path) const;

 private:
  const cachestore::RootDir& source_;
};

}  // namespace epochfs::prefetch
