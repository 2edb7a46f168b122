#include "cachestore/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "cachestore/hex.h"
#include "cachestore/leftovers.h"
#include "cachestore/log.h"
#include "cachestore/trusted_path.h"

namespace epochfs::cachestore {
namespace {

Status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::error(errno, "mkdir " + path);
  }
  return Status::ok();
}

// Makes root/name empty and locked. Built under a name other mounts do not take for a mount's
// (".new.<key>.<id of this process>"), locked, and only then renamed into place: a mount
// starting at the same moment never sees it without its lock held. The lock file is locked
// under another name and then renamed `lock`, so a `lock` that can be taken is always dead
// (cachestore/leftovers.h). Returns the directory's and the lock's descriptors.
Result<std::pair<UniqueFd, UniqueFd>> build_locked(const std::string& root,
                                                   const std::string& name) {
  const std::string building =
      root + "/" + kBuildingPrefix + name.substr(0, name.find('.') + 1) + process_dir_id();
  const std::string path = root + "/" + name;
  if (::mkdir(building.c_str(), 0700) != 0) {
    // Said of root: the name being built is ours, not the user's.
    return Status::error(errno, "cannot make a mount's directory in " + root);
  }
  auto fail = [&building](const char* what) {
    const int err = errno;
    std::error_code ignored;
    std::filesystem::remove_all(building, ignored);
    return Status::error(err, what + (" " + building));
  };
  UniqueFd dir_fd(::open(building.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) {
    return fail("open");
  }
  UniqueFd lock_fd(::openat(dir_fd.get(), kNewLockName, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_fd.valid() || ::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0 ||
      ::renameat(dir_fd.get(), kNewLockName, dir_fd.get(), kLockName) != 0) {
    return fail("lock");
  }
  if (::rename(building.c_str(), path.c_str()) != 0) {
    return fail("rename");
  }
  return std::make_pair(std::move(dir_fd), std::move(lock_fd));
}

// Makes root, mode 0700, and the directories above it that are missing, mode 0755 (the umask
// may take more away, never add), then checks that no other user can change it
// (cachestore/trusted_path.h).
Status make_trusted_root(const std::string& root) {
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    const std::filesystem::path parent = std::filesystem::path(root).parent_path();
    std::filesystem::path above;
    for (const auto& part : parent) {
      above /= part;
      if (::mkdir(above.c_str(), 0755) != 0 && errno != EEXIST) {
        break;  // the mkdir of root says why
      }
    }
    Status s = make_dir(root, 0700);
    if (!s.is_ok()) {
      return s;
    }
  }
  return check_cache_root(root, ::geteuid());
}

// Drops from dead the kept directories (with an index) that another user could have written,
// each with a warning: their copies and index may be forged, so they are not adopted; and as
// they may not be ours, they are not removed either. Their locks are let go.
void leave_untrusted_kept(const std::string& root, std::vector<Leftover>& dead) {
  auto untrusted = [&root](const Leftover& l) {
    if (l.entry.index_mtime_s < 0) {
      return false;
    }
    const std::string path = root + "/" + l.entry.name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    const Status s =
        fd.valid() ? check_kept_dir(fd.get(), path, ::geteuid()) : Status::error(errno, path);
    if (!s.is_ok()) {
      log(LogLevel::kWarning,
          "the kept cache %s is not adopted (nor removed): %s; remove it if it is not yours",
          path.c_str(), (s.error_code() == EPERM ? s.context() : s.to_string()).c_str());
    }
    return !s.is_ok();
  };
  dead.erase(std::remove_if(dead.begin(), dead.end(), untrusted), dead.end());
}

void log_removed(const std::string& root, const Leftover& l) {
  log(LogLevel::kInfo, "removed the cache directory of a dead mount: %s/%s", root.c_str(),
      l.entry.name.c_str());
}

// The dead directories of the source `key`; the others are dealt with here: a dead mount's
// directory is renamed to trash for the background removal (unless kept: it waits for its own
// source), an unfinished one (a lock file at most) is removed at once. *others counts them.
std::vector<Leftover> sort_leftovers(const std::string& root, const std::string& key, int* others) {
  std::vector<Leftover> own;
  for (CacheDirEntry& e : list_cache_dirs(root)) {
    const bool mine = e.key == key;
    // Trash is the background removal's. Another source's directory without a lock file may
    // not be epochfs's at all; with an index it is kept for that source.
    if (e.kind == CacheDirKind::kTrash ||
        (!mine && e.kind == CacheDirKind::kMount && (!e.has_lock_file || e.index_mtime_s >= 0))) {
      continue;
    }
    Leftover l{std::move(e), UniqueFd()};
    if (!claim_if_dead(root, l.entry, &l.lock)) {
      continue;
    }
    if (mine) {
      own.push_back(std::move(l));
      continue;
    }
    const std::string name = l.entry.name;
    Status s =
        l.entry.kind == CacheDirKind::kMount ? trash_leftover(root, l) : remove_leftover(root, l);
    if (s.is_ok()) {
      ++*others;
      log(LogLevel::kInfo, "the cache directory of a dead mount of another source, %s/%s, %s",
          root.c_str(), name.c_str(),
          l.entry.kind == CacheDirKind::kTrash ? "is removed in the background" : "was removed");
    } else {
      log(LogLevel::kWarning, "cannot remove a dead mount's cache directory: %s",
          s.to_string().c_str());
    }
  }
  return own;
}

}  // namespace

Result<std::unique_ptr<CacheDir>> CacheDir::adopt(const std::string& root, const std::string& from,
                                                  UniqueFd lock, const std::string& path) {
  // We hold its lock, so no other mount removes or adopts it while we rename it.
  if (::rename(from.c_str(), path.c_str()) != 0) {
    return Status::error(errno, "rename " + from);
  }
  UniqueFd dir_fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) {
    return Status::error(errno, "open " + path);
  }
  auto dir =
      std::unique_ptr<CacheDir>(new CacheDir(root, path, std::move(dir_fd), std::move(lock)));
  dir->adopted_ = true;
  dir->keep_ = true;
  log(LogLevel::kInfo, "reusing the cache kept by an earlier mount: %s", path.c_str());
  return dir;
}

Result<std::unique_ptr<CacheDir>> CacheDir::create(const std::string& root,
                                                   const std::string& source_key, bool keep) {
  Status trusted = make_trusted_root(root);
  if (!trusted.is_ok()) {
    return trusted;
  }
  const std::string key = source_dir_key(source_key);
  const std::string name = key + "." + process_dir_id();
  const std::string path = root + "/" + name;
  int others = 0;
  std::vector<Leftover> dead = sort_leftovers(root, key, &others);
  leave_untrusted_kept(root, dead);
  // With keep, the newest leftover that has an index is adopted; every other one is removed.
  auto newest = std::max_element(dead.begin(), dead.end(), [](const auto& a, const auto& b) {
    return a.entry.index_mtime_s < b.entry.index_mtime_s;
  });
  const bool adopting =
      keep && newest != dead.end() && newest->entry.index_mtime_s >= 0 && newest->lock.valid();
  int removed = 0;
  for (auto it = dead.begin(); it != dead.end(); ++it) {
    if (!(adopting && it == newest) && remove_leftover(root, *it).is_ok()) {
      log_removed(root, *it);
      ++removed;
    }
  }
  std::unique_ptr<CacheDir> dir;
  if (adopting) {
    auto adopted = adopt(root, root + "/" + newest->entry.name, std::move(newest->lock), path);
    if (!adopted.is_ok()) {
      return adopted.status();
    }
    dir = std::move(adopted).value();
  } else {
    auto built = build_locked(root, name);
    if (!built.is_ok()) {
      return built.status();
    }
    auto [dir_fd, lock_fd] = std::move(built).value();
    dir =
        std::unique_ptr<CacheDir>(new CacheDir(root, path, std::move(dir_fd), std::move(lock_fd)));
    dir->keep_ = keep;
  }
  dir->leftovers_removed_ = removed;
  dir->other_leftovers_ = others;
  return dir;
}

void CacheDir::start_background_removal() const {
  MutexLock lock(remover_mu_);
  if (remover_started_) {
    return;
  }
  remover_started_ = true;
  try {
    remover_ = std::thread([this] { remove_trash(); });
  } catch (const std::system_error& e) {
    log(LogLevel::kWarning, "cannot start removing dead cache directories (%s): left for later",
        e.what());
  }
}

int CacheDir::wait_background_removal() {
  start_background_removal();
  return join_background_removal();
}

int CacheDir::join_background_removal() {
  std::thread remover;
  {
    MutexLock lock(remover_mu_);
    remover = std::move(remover_);
  }
  if (remover.joinable()) {
    remover.join();
  }
  return trash_removed_.load(std::memory_order_relaxed);
}

void CacheDir::remove_trash() const {
  // Failures are harmless. Named, so that a test can see when it has finished
  // (/proc/<pid>/task/*/comm).
  name_this_thread("epochfs-cleaner");
  lower_this_thread_priority();  // readers, copies and the unmount go first
  for (CacheDirEntry& e : list_cache_dirs(root_)) {
    if (stop_removal_.load(std::memory_order_relaxed)) {
      return;
    }
    Leftover l{std::move(e), UniqueFd()};
    if (l.entry.kind != CacheDirKind::kTrash || !claim_if_dead(root_, l.entry, &l.lock)) {
      continue;
    }
    Status s = remove_leftover(root_, l, &stop_removal_);
    if (s.is_ok()) {
      log_removed(root_, l);
      trash_removed_.fetch_add(1, std::memory_order_relaxed);
    } else if (s.error_code() != EINTR) {
      log(LogLevel::kWarning, "cannot remove a dead mount's cache directory: %s",
          s.to_string().c_str());
    }
  }
}

CacheDir::~CacheDir() {
  stop_removal_.store(true, std::memory_order_relaxed);
  join_background_removal();
  if (keep_) {
    return;  // left for the next mount; its lock goes with lock_fd_
  }
  give_up();
  if (removal_name_->empty()) {
    return;  // removed or moved away from under us: nothing of ours to remove
  }
  Leftover own{CacheDirEntry{}, std::move(lock_fd_)};
  own.entry.name = *removal_name_;
  // The mount is over and the kernel done with it; the node's jobs go first.
  lower_this_thread_priority();
  log(LogLevel::kInfo, "removing the cache directory %s", path_.c_str());
  const Status s = remove_leftover(root_, own);
  if (!s.is_ok()) {
    log(LogLevel::kWarning, "cannot remove the cache directory %s: %s", path_.c_str(),
        s.to_string().c_str());
  }
}

void CacheDir::give_up() {
  if (keep_ || removal_name_) {
    return;
  }
  // A rename, so cheap: `epochfs unmount` may return once the name is gone, while unlinking
  // a million copies takes minutes. Should this process die before the end, the next mount or
  // `epochfs clean` finds a dead ".trash." directory and removes it. The lock stays held (its
  // file is removed last), so no one else does meanwhile.
  Leftover own{CacheDirEntry{}, UniqueFd()};
  own.entry.name = std::filesystem::path(path_).filename().string();
  own.entry.kind = CacheDirKind::kMount;
  const Status s = trash_leftover(root_, own);
  // After a failed rename, removed under its own name.
  removal_name_ = !s.is_ok() && s.error_code() == ENOENT ? "" : own.entry.name;
}

std::string CacheDir::object_name(const std::string& source_path) {
  const XXH128_hash_t h = XXH3_128bits(source_path.data(), source_path.size());
  std::string name(35, '/');  // "ab/ab..." : the fan-out directory, then 32 digits
  put_hex64(h.high64, name.data() + 3);
  put_hex64(h.low64, name.data() + 19);
  name[0] = name[3];
  name[1] = name[4];
  return name;
}

bool CacheDir::removed() const {
  struct stat st;
  return ::fstat(dir_fd_.get(), &st) == 0 && st.st_nlink == 0;
}

Status CacheDir::recreate() {
  const std::filesystem::path path(path_);
  const std::string root = path.parent_path().string();
  Status s = make_dir(root, 0700);
  if (!s.is_ok()) {
    return s;
  }
  auto built = build_locked(root, path.filename().string());
  if (!built.is_ok()) {
    return built.status();
  }
  // dup3 replaces what the descriptors name in one step: a thread using fd() meanwhile reaches
  // the old directory or the new one, never a closed or reused descriptor.
  if (::dup3(built.value().first.get(), dir_fd_.get(), O_CLOEXEC) < 0 ||
      ::dup3(built.value().second.get(), lock_fd_.get(), O_CLOEXEC) < 0) {
    return Status::error(errno, "dup3 " + path_);
  }
  return Status::ok();
}

Status CacheDir::make_parents(const std::string& name) const {
  // name is "ab/<hex>": the fan-out directory is created on first use.
  for (size_t slash = name.find('/'); slash != std::string::npos;
       slash = name.find('/', slash + 1)) {
    const std::string dir = name.substr(0, slash);
    if (::mkdirat(dir_fd_.get(), dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::error(errno, "mkdir " + path_ + "/" + dir);
    }
  }
  return Status::ok();
}

Result<struct statvfs> CacheDir::statfs() const {
  struct statvfs st;
  if (::fstatvfs(dir_fd_.get(), &st) != 0) {
    return Status::error(errno, "statvfs " + path_);
  }
  return st;
}

}  // namespace epochfs::cachestore
