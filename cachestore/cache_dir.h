// CacheDir: one mount's directory inside the cache root, and its lifecycle.
//
// Layout: <root>/<source-hash>.<pid>-<start>/ holds a `lock` file (flock'ed for the mount's
// life) and the cached copies under one level of 256 fan-out directories: ab/<32 hex digits
// of XXH128(path)>. One level keeps a directory under ~40,000 entries up to 10 million files,
// and measured faster than two levels for cold reads of 10,000 files (fewer directory blocks
// to read: docs/benchmarks.md). The name carries the creating process's pid and start time,
// so it is never reused (cachestore/leftovers.h).
//
// Leftovers: a directory whose lock can be taken belongs to a dead mount. create() removes
// those of its own source at once (a kept one may be adopted instead). Those of other sources
// it renames to ".trash.<name>" (cheap), and a background thread owned by the CacheDir deletes
// every dead ".trash." directory of the root; a kept directory (with an index) of another
// source is left for its own source. Nothing else in the root is ever touched. See
// docs/cache-format.md.
//
// The background thread: create() runs before the daemon forks, and threads do not survive a
// fork, so create() starts none. start_background_removal() starts it (the engine calls it
// through CacheStore::start_cleanup once the daemon runs). The destructor stops it after the entry
// it is on and joins it; what it did not remove is dead trash for the next mount or `epochfs
// clean`.
//
// Thread-safety: all methods may be called concurrently, except recreate() (see there).
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

class CacheDir {
 public:
  // The index a kept directory carries from one mount to the next (docs/cache-format.md).
  static constexpr char kIndexName[] = "index";

  // Creates root with mode 0700 if missing, and fails (EPERM, saying what to fix) if another
  // user could change it or a directory above it (cachestore/trusted_path.h). Removes
  // directories left by dead mounts of the same source, renames those of other sources
  // (unless kept) for removal in the background, then creates and locks this mount's
  // directory. With keep, the newest dead directory of the same source that has an index is
  // adopted instead (adopted() is true) and the directory is left in place at destruction. A
  // kept directory another user could have written is neither adopted nor removed: it is left
  // with a warning. Starts no thread.
  static Result<std::unique_ptr<CacheDir>> create(const std::string& root,
                                                  const std::string& source_key, bool keep = false);

  // Stops the background removal, then removes this mount's directory and everything in it,
  // unless it is kept.
  ~CacheDir();
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  // The object name of a source file (its path relative to the source root): "ab/<32 hex>"
  // of the path's XXH3-128. Pure; the same on every mount.
  static std::string object_name(const std::string& source_path);

  // Creates the fan-out directory above name if missing. Starts the background removal.
  Status make_parents(const std::string& name) const;

  // Starts the thread that removes the dead ".trash." directories of the root, once. Call
  // only when no fork is to follow (the thread would not survive it).
  void start_background_removal() const EXCLUDES(remover_mu_);

  // Starts the background removal if need be and waits for it to end; the number of
  // directories it removed. For tests.
  int wait_background_removal() EXCLUDES(remover_mu_);

  int fd() const { return dir_fd_.get(); }

  // Whether this mount's directory was deleted while mounted (by a cleaner, or `rm -rf` of
  // the cache directory's contents): its descriptor then names a directory with no links.
  bool removed() const;

  // Makes the directory again, empty, at the same path and with its lock, after removed().
  // fd() keeps its number and names the new directory once this returns. Not to be called
  // by two threads at once.
  Status recreate();

  const std::string& path() const { return path_; }

  // The mount is over and keeps nothing (not keep): renames the directory to ".trash." now;
  // the destructor removes it (copies still being made go on in it). Once; not concurrently
  // with the destructor.
  void give_up();

  Result<struct statvfs> statfs() const;

  // Number of leftover directories of this source removed by create(). For tests and the log.
  int leftovers_removed() const { return leftovers_removed_; }

  // Number of leftover directories of other sources create() gave up for removal (renamed to
  // ".trash.", or removed at once if unfinished). For tests and the log.
  int other_leftovers() const { return other_leftovers_; }

  // True if this directory was kept by an earlier mount and adopted.
  bool adopted() const { return adopted_; }

 private:
  CacheDir(std::string root, std::string path, UniqueFd dir_fd, UniqueFd lock_fd)
      : root_(std::move(root)),
        path_(std::move(path)),
        dir_fd_(std::move(dir_fd)),
        lock_fd_(std::move(lock_fd)) {}

  // Renames the dead directory `from`, whose lock we hold, to path and takes it over.
  static Result<std::unique_ptr<CacheDir>> adopt(const std::string& root, const std::string& from,
                                                 UniqueFd lock, const std::string& path);

  // The background thread's body: removes the dead ".trash." directories of root_.
  void remove_trash() const;

  // Waits for the background removal if it was started; the number it removed.
  int join_background_removal() EXCLUDES(remover_mu_);

  // Constant after create().
  std::string root_;
  std::string path_;
  UniqueFd dir_fd_;
  UniqueFd lock_fd_;  // flock'ed: proves to other mounts that this directory is alive
  int leftovers_removed_ = 0;
  int other_leftovers_ = 0;
  bool adopted_ = false;
  bool keep_ = false;
  // Set by give_up(): the name to remove at the end ("" if the directory was gone).
  std::optional<std::string> removal_name_;

  // The background removal. remover_mu_ guards only the thread object: it is held while the
  // thread is created.
  mutable Mutex remover_mu_;
  mutable std::thread remover_ GUARDED_BY(remover_mu_);
  mutable bool remover_started_ GUARDED_BY(remover_mu_) = false;
  // Set by the destructor; the thread stops after the entry it is on. Relaxed: it orders
  // nothing, the join does.
  std::atomic<bool> stop_removal_{false};
  mutable std::atomic<int> trash_removed_{0};  // written by the thread; read after the join
};

}  // namespace epochfs::cachestore
