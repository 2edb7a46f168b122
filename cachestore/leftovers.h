// Leftovers: the directories of a cache root, and which of them dead mounts left. One piece of
// code for every mount (CacheDir::create) and for the operator's `epochfs clean`.
//
// Names (docs/cache-format.md). A mount's directory is "<key>.<id>": key is 16 hex digits of
// the source, id is "<pid>-<start>" of the process that made it, start being the process's
// start time (field 22 of /proc/<pid>/stat). No two processes alive at once share both, so a
// name is never taken over by a later process that happens to get the same pid. The
// directory is built as ".new.<key>.<id>" (id of the building process) and, once a mount
// gives it up for removal in the background, renamed ".trash.<name>". Nothing else in a root
// is epochfs's, and nothing else is ever touched.
//
// Liveness. A finished directory is alive while its `lock` is flock'ed: by its mount, by a
// process adopting it, or, under ".trash.", by the process removing it. Whoever takes the
// lock of a dead one holds it while it removes or adopts it, so two processes never do both.
// A builder takes the lock before the file gets the name `lock` (it is created as
// `lock.new`), so a `lock` that can be taken is dead at every stage. A ".new." directory with
// no `lock` yet is judged by the pid and start time in its name against /proc, which a
// reused pid cannot fool. A removal deletes the lock file last: a ".trash." directory with no
// lock is dead (or is being emptied of its last entry).
//
// Thread-safety: free functions with no shared state; a Leftover is a value with one owner.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

inline constexpr char kLockName[] = "lock";
// The lock file under the name its builder creates and locks it with, before renaming it.
inline constexpr char kNewLockName[] = "lock.new";
inline constexpr char kBuildingPrefix[] = ".new.";
inline constexpr char kTrashPrefix[] = ".trash.";

// The key of a source in directory names: 16 hex digits of XXH3-64 of its absolute path.
std::string source_dir_key(const std::string& source_key);

// This process's id in directory names, "<pid>-<start>". Read again at every call: a forked
// daemon has an id of its own.
std::string process_dir_id();

enum class CacheDirKind {
  kMount,     // "<key>.<id>": a mount's directory, kept for the next mount if it has an index
  kBuilding,  // ".new.<key>.<id>": being built, or its builder died first
  kTrash,     // ".trash.<key>.<id>": given up, removed in the background
};

// An entry of a cache root named like an epochfs directory. Directories of epochfs versions
// that named them "<key>.<pid>" are recognised too (start 0).
struct CacheDirEntry {
  std::string name;  // in the root
  CacheDirKind kind = CacheDirKind::kMount;
  std::string key;  // the source's 16 hex digits
  pid_t pid = 0;
  uint64_t start = 0;  // 0: the name has no start time
  bool has_lock_file = false;
  int64_t index_mtime_s = -1;  // a mount directory's index: when it was written; -1: none
};

// The entries of root named like epochfs directories, in no order. Takes no lock.
std::vector<CacheDirEntry> list_cache_dirs(const std::string& root);

// Whether e was left by a dead mount (see Liveness above). If so and it has a lock file, *lock
// holds that lock on return, so that no other process removes or adopts it meanwhile. A mount
// directory with no lock file counts as dead: an old epochfs died while creating it, or it is
// not epochfs's at all; only the mount of its own source removes it.
bool claim_if_dead(const std::string& root, const CacheDirEntry& e, UniqueFd* lock);

struct Leftover {
  CacheDirEntry entry;
  UniqueFd lock;  // held until it is removed or adopted; invalid if it has no lock file
};

// Every directory of root that dead mounts left and that is certainly epochfs's (a mount
// directory without a lock file is not listed), each claimed. For `epochfs clean`.
std::vector<Leftover> find_dead_cache_dirs(const std::string& root);

// Removes root/<l's name> with everything in it, its lock file last. If *stop becomes true,
// returns early (EINTR) and what is left is still a leftover.
Status remove_leftover(const std::string& root, const Leftover& l,
                       const std::atomic<bool>* stop = nullptr);

// Renames l to ".trash.<name>", for removal in the background; l then names the trash.
Status trash_leftover(const std::string& root, Leftover& l);

// The disk space root/name uses, as du counts it (allocated blocks); not following links.
uint64_t disk_bytes(const std::string& root, const std::string& name);

}  // namespace epochfs::cachestore
