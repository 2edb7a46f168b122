#include "cachestore/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "cachestore/cache_dir.h"
#include "cachestore/hex.h"
#include "cachestore/proc_stat.h"

namespace epochfs::cachestore {
namespace {

// Deeper trees are not epochfs's (a mount directory is two levels deep): a removal or a size
// stops there rather than risk running out of descriptors.
constexpr int kMaxDepth = 16;

// Threads that empty a mount directory's fan-out directories at once. Unlinking waits on the
// disk, not the CPU: 8 at once removed 200,000 small files 2.4 times as fast as one.
constexpr unsigned kRemoveThreads = 8;

// An unreadable entry is retried this often: readdir may skip entries of a directory that is
// changed while it is read.
constexpr int kRemovePasses = 3;

// Whether the process that built a directory named with pid and start is still running. A
// name without a start time (an older epochfs) is judged by its pid alone.
bool builder_alive(pid_t pid, uint64_t start) {
  if (pid <= 0) {
    return false;
  }
  if (const auto st = ProcStat::of(pid)) {
    return !st->exited() && (start == 0 || st->number(ProcStat::kStartTime) == start);
  }
  // Not in /proc: gone, unless /proc hides it (hidepid) or is not mounted.
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

bool all_of(const std::string& s, size_t from, size_t to, const char* chars) {
  return from < to && s.find_first_not_of(chars, from) >= to;
}

// "[.new.|.trash.]<16 hex>.<pid>[-<start>]", or nullopt.
std::optional<CacheDirEntry> parse_name(const std::string& name) {
  CacheDirEntry e;
  e.name = name;
  size_t i = 0;
  if (name.rfind(kBuildingPrefix, 0) == 0) {
    e.kind = CacheDirKind::kBuilding;
    i = sizeof(kBuildingPrefix) - 1;
  } else if (name.rfind(kTrashPrefix, 0) == 0) {
    e.kind = CacheDirKind::kTrash;
    i = sizeof(kTrashPrefix) - 1;
  }
  constexpr size_t kKeyDigits = 16;
  if (name.size() < i + kKeyDigits + 2 || !all_of(name, i, i + kKeyDigits, "0123456789abcdef") ||
      name[i + kKeyDigits] != '.') {
    return std::nullopt;
  }
  e.key = name.substr(i, kKeyDigits);
  const size_t pid_at = i + kKeyDigits + 1;
  const size_t dash = name.find('-', pid_at);
  const size_t pid_end = dash == std::string::npos ? name.size() : dash;
  if (!all_of(name, pid_at, pid_end, "0123456789") || pid_end - pid_at > 10 ||
      (dash != std::string::npos &&
       (!all_of(name, dash + 1, name.size(), "0123456789") || name.size() - dash - 1 > 20))) {
    return std::nullopt;
  }
  e.pid = static_cast<pid_t>(std::strtoll(name.c_str() + pid_at, nullptr, 10));
  e.start = dash == std::string::npos ? 0 : std::strtoull(name.c_str() + dash + 1, nullptr, 10);
  return e;
}

// The lock of root/name, taken; an invalid fd if a live process holds it or it cannot be
// opened (not ours to judge).
UniqueFd take_lock(const std::string& root, const std::string& name) {
  const std::string path = root + "/" + name + "/" + kLockName;
  UniqueFd lock(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (lock.valid() && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    lock.reset();
  }
  return lock;
}

// A directory stream over dir_fd, read from its start; nullptr on failure. A duplicate shares
// the descriptor's position, which an earlier stream over it left at the end: without the
// rewind, every stream but the first saw an empty directory.
DIR* stream_of(int dir_fd) {
  UniqueFd dup(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  DIR* d = dup.valid() ? ::fdopendir(dup.get()) : nullptr;
  if (d != nullptr) {
    dup.release();  // closedir closes it
    ::rewinddir(d);
  }
  return d;
}

// Removes every entry of the directory dir_fd except `keep` (may be null). Returns the number
// of entries it saw (0: the directory was empty but for keep), or -1 on failure or stop.
int remove_entries(int dir_fd, const char* keep, const std::atomic<bool>* stop, int depth);

// Empties the directory dir_fd but for keep; false if it cannot.
bool empty_dir(int dir_fd, const char* keep, const std::atomic<bool>* stop, int depth) {
  for (int pass = 0; pass < kRemovePasses; ++pass) {
    const int seen = remove_entries(dir_fd, keep, stop, depth);
    if (seen <= 0) {
      return seen == 0;
    }
  }
  return false;
}

int remove_entries(int dir_fd, const char* keep, const std::atomic<bool>* stop, int depth) {
  DIR* d = stream_of(dir_fd);
  if (d == nullptr) {
    return -1;
  }
  int seen = 0;
  bool ok = true;
  // readdir is safe on a stream no other thread uses (glibc); the check cannot tell.
  while (struct dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe)
    const char* name = e->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        (keep != nullptr && strcmp(name, keep) == 0)) {
      continue;
    }
    // Relaxed: a stop request needs no ordering with other memory, only to be seen soon.
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
      ok = false;
      break;
    }
    ++seen;
    if (e->d_type != DT_DIR && (::unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)) {
      continue;
    }
    if (e->d_type != DT_DIR && errno != EISDIR) {
      ok = false;
      continue;
    }
    UniqueFd sub(::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) {
      ok = ok && errno == ENOENT;
      continue;
    }
    if (depth >= kMaxDepth || !empty_dir(sub.get(), nullptr, stop, depth + 1) ||
        (::unlinkat(dir_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)) {
      ok = false;
    }
  }
  ::closedir(d);
  return ok ? seen : -1;
}

// The subdirectories of dir_fd (by d_type; others are left to the caller's pass).
std::vector<std::string> subdirs(int dir_fd) {
  std::vector<std::string> names;
  DIR* d = stream_of(dir_fd);
  if (d == nullptr) {
    return names;
  }
  while (struct dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): a stream of ours
    if (e->d_type == DT_DIR && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  ::closedir(d);
  return names;
}

// Empties and removes the subdirectories of dir_fd (a mount directory's fan-out directories)
// on kRemoveThreads threads. Best effort: what fails here, the caller's own pass meets again.
void remove_subdirs_in_parallel(int dir_fd, const std::atomic<bool>* stop) {
  const std::vector<std::string> names = subdirs(dir_fd);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < names.size(); i = next++) {
      UniqueFd sub(
          ::openat(dir_fd, names[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid() && empty_dir(sub.get(), nullptr, stop, 1)) {
        ::unlinkat(dir_fd, names[i].c_str(), AT_REMOVEDIR);
      }
    }
  };
  std::vector<std::thread> threads;
  try {
    for (unsigned t = 1; t < kRemoveThreads && t < names.size(); ++t) {
      threads.emplace_back(work);
    }
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one do the work.
  }
  work();
  for (auto& t : threads) {
    t.join();
  }
}

uint64_t tree_bytes(int dir_fd, int depth) {
  DIR* d = stream_of(dir_fd);
  if (d == nullptr) {
    return 0;
  }
  uint64_t bytes = 0;
  while (struct dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): a stream of ours
    struct stat st;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        ::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    bytes += static_cast<uint64_t>(st.st_blocks) * 512;  // st_blocks: 512-byte units
    if (S_ISDIR(st.st_mode) && depth < kMaxDepth) {
      UniqueFd sub(::openat(dir_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      bytes += sub.valid() ? tree_bytes(sub.get(), depth + 1) : 0;
    }
  }
  ::closedir(d);
  return bytes;
}

}  // namespace

std::string source_dir_key(const std::string& source_key) {
  return hex64(XXH3_64bits(source_key.data(), source_key.size()));
}

std::string process_dir_id() {
  const pid_t pid = ::getpid();
  const auto st = ProcStat::of(pid);
  const auto start = st ? st->number(ProcStat::kStartTime) : std::nullopt;
  // Without /proc the name falls back to the pid alone, judged as an older epochfs's.
  return std::to_string(pid) + (start ? "-" + std::to_string(*start) : "");
}

std::vector<CacheDirEntry> list_cache_dirs(const std::string& root) {
  std::vector<CacheDirEntry> entries;
  UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = root_fd.valid() ? ::fdopendir(root_fd.get()) : nullptr;
  if (d == nullptr) {
    return entries;
  }
  const int fd = root_fd.release();           // closedir closes it
  while (struct dirent* de = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): a stream of ours
    auto e = parse_name(de->d_name);
    struct stat st;
    if (!e || ::fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      continue;
    }
    const std::string lock = e->name + "/" + kLockName;
    e->has_lock_file = ::fstatat(fd, lock.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    const std::string index = e->name + "/" + CacheDir::kIndexName;
    if (e->kind == CacheDirKind::kMount && ::fstatat(fd, index.c_str(), &st, 0) == 0) {
      e->index_mtime_s = st.st_mtim.tv_sec;
    }
    entries.push_back(std::move(*e));
  }
  ::closedir(d);
  return entries;
}

bool claim_if_dead(const std::string& root, const CacheDirEntry& e, UniqueFd* lock) {
  // An older epochfs judged its ".new." directories by pid alone and locked the lock file
  // after naming it: probing it could take the lock from its builder.
  const bool legacy_building = e.kind == CacheDirKind::kBuilding && e.start == 0;
  if (e.has_lock_file && !legacy_building) {
    *lock = take_lock(root, e.name);
    return lock->valid();
  }
  switch (e.kind) {
    case CacheDirKind::kBuilding:
      return !builder_alive(e.pid, e.start);
    case CacheDirKind::kMount:
    case CacheDirKind::kTrash:
      return true;
  }
  return false;
}

std::vector<Leftover> find_dead_cache_dirs(const std::string& root) {
  std::vector<Leftover> dead;
  for (CacheDirEntry& e : list_cache_dirs(root)) {
    UniqueFd lock;
    if ((e.kind != CacheDirKind::kMount || e.has_lock_file) && claim_if_dead(root, e, &lock)) {
      dead.push_back(Leftover{std::move(e), std::move(lock)});
    }
  }
  return dead;
}

Status remove_leftover(const std::string& root, const Leftover& l, const std::atomic<bool>* stop) {
  const std::string path = root + "/" + l.entry.name;
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) {
    return errno == ENOENT ? Status::ok() : Status::error(errno, "open " + path);
  }
  remove_subdirs_in_parallel(dir.get(), stop);
  // The lock file goes last: until then the directory is seen as held by its remover.
  if (!empty_dir(dir.get(), kLockName, stop, 0)) {
    const bool stopped = stop != nullptr && stop->load(std::memory_order_relaxed);
    return Status::error(stopped ? EINTR : EIO, "cannot empty " + path);
  }
  if ((::unlinkat(dir.get(), kLockName, 0) != 0 && errno != ENOENT) ||
      (::rmdir(path.c_str()) != 0 && errno != ENOENT)) {
    return Status::error(errno, "remove " + path);
  }
  return Status::ok();
}

Status trash_leftover(const std::string& root, Leftover& l) {
  std::string trash = kTrashPrefix + l.entry.name;
  if (l.entry.kind == CacheDirKind::kBuilding) {
    trash = kTrashPrefix + l.entry.name.substr(sizeof(kBuildingPrefix) - 1);
  } else if (l.entry.kind == CacheDirKind::kTrash) {
    return Status::ok();
  }
  if (::rename((root + "/" + l.entry.name).c_str(), (root + "/" + trash).c_str()) != 0) {
    return Status::error(errno, "rename " + root + "/" + l.entry.name);
  }
  l.entry.name = trash;
  l.entry.kind = CacheDirKind::kTrash;
  return Status::ok();
}

uint64_t disk_bytes(const std::string& root, const std::string& name) {
  const std::string path = root + "/" + name;
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!dir.valid() || ::fstat(dir.get(), &st) != 0) {
    return 0;
  }
  return static_cast<uint64_t>(st.st_blocks) * 512 + tree_bytes(dir.get(), 0);
}

}  // namespace epochfs::cachestore
