// CacheDir: one mount's directory inside the cache root, and its lifecycle.
//
// Layout: <root>/<source-hash>.<pid>/ holds a `lock` file (flock'ed for the mount's life) and
// the cached copies under one level of 256 fan-out directories: ab/<32 hex digits of
// XXH128(path)>. One level keeps a directory under ~40,000 entries up to 10 million files,
// and measured faster than two levels for cold reads of 10,000 files (fewer directory blocks
// to read: docs/benchmarks.md). A
// directory whose lock can be taken belongs to a dead mount: the next mount of the same source
// removes it. Nothing else in the root is ever touched. See docs/cache-format.md.
//
// Thread-safety: all methods may be called concurrently, except recreate() (see there).
#pragma once

#include <sys/statvfs.h>

#include <memory>
#include <string>

#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

class CacheDir {
 public:
  // The index a kept directory carries from one mount to the next (docs/cache-format.md).
  static constexpr char kIndexName[] = "index";

  // Creates root with mode 0700 if missing, removes directories left by dead mounts of the
  // same source, then creates and locks this mount's directory. With keep, the newest dead
  // directory of the same source that has an index is adopted instead (adopted() is true)
  // and the directory is left in place at destruction.
  static Result<std::unique_ptr<CacheDir>> create(const std::string& root,
                                                  const std::string& source_key, bool keep = false);

  // Removes this mount's directory and everything in it, unless it is kept.
  ~CacheDir();
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  // The object name of a source file (its path relative to the source root):
  // "ab/<32 hex>". Pure; the same on every mount.
  static std::string object_name(const std::string& source_path);

  // Creates the fan-out directory above name if missing.
  Status make_parents(const std::string& name) const;

  int fd() const { return dir_fd_.get(); }

  // Whether this mount's directory was deleted while mounted (by a cleaner, or `rm -rf` of
  // the cache directory's contents): its descriptor then names a directory with no links.
  bool removed() const;

  // Makes the directory again, empty, at the same path and with its lock, after removed().
  // fd() keeps its number and names the new directory once this returns. Not to be called
  // by two threads at once.
  Status recreate();

  const std::string& path() const { return path_; }

  Result<struct statvfs> statfs() const;

  // Number of leftover directories removed by create(). For tests and the log.
  int leftovers_removed() const { return leftovers_removed_; }

  // True if this directory was kept by an earlier mount and adopted.
  bool adopted() const { return adopted_; }

 private:
  CacheDir(std::string path, UniqueFd dir_fd, UniqueFd lock_fd)
      : path_(std::move(path)), dir_fd_(std::move(dir_fd)), lock_fd_(std::move(lock_fd)) {}

  // Renames the dead directory `from`, whose lock we hold, to path and takes it over.
  static Result<std::unique_ptr<CacheDir>> adopt(const std::string& from, UniqueFd lock,
                                                 const std::string& path, int removed);

  std::string path_;
  UniqueFd dir_fd_;
  UniqueFd lock_fd_;  // flock'ed: proves to other mounts that this directory is alive
  int leftovers_removed_ = 0;
  bool adopted_ = false;
  bool keep_ = false;
};

}  // namespace epochfs::cachestore
