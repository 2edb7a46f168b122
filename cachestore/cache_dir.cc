#include "cachestore/cache_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <xxhash.h>

#include "cachestore/log.h"

namespace epochfs::cachestore {
namespace {

constexpr char kLockName[] = "lock";

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string source_prefix(const std::string& source_key) {
  return hex64(XXH3_64bits(source_key.data(), source_key.size())) + ".";
}

Status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::error(errno, "mkdir " + path);
  }
  return Status::ok();
}

constexpr char kBuildingPrefix[] = ".new.";

// A directory still being built (".new.<prefix><pid>") has no lock yet, or one being taken;
// probing it could steal the lock from its builder. It is dead only if its builder is.
bool builder_alive(const std::string& name) {
  const size_t dot = name.rfind('.');
  const long pid = std::strtol(name.c_str() + dot + 1, nullptr, 10);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// The lock of a finished directory, taken; an invalid fd if a live mount holds it.
UniqueFd take_lock(const std::string& dir) {
  UniqueFd lock(::open((dir + "/" + kLockName).c_str(), O_RDWR | O_CLOEXEC));
  if (lock.valid() && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    lock.reset();
  }
  return lock;
}

struct Leftover {
  std::string path;
  UniqueFd lock;             // held while we remove or adopt it, so no one else does the same
  int64_t index_mtime = -1;  // -1: no index, nothing to adopt
};

std::vector<Leftover> find_dead_leftovers(const std::string& root, const std::string& prefix) {
  std::vector<Leftover> dead;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    return dead;
  }
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = root + "/" + name;
    if (name.rfind(kBuildingPrefix + prefix, 0) == 0 && !builder_alive(name)) {
      dead.push_back(Leftover{path, UniqueFd(), -1});
    } else if (name.rfind(prefix, 0) == 0) {
      UniqueFd lock = take_lock(path);
      struct stat st;
      const bool has_index = ::stat((path + "/" + CacheDir::kIndexName).c_str(), &st) == 0;
      if (lock.valid() || ::access((path + "/" + kLockName).c_str(), F_OK) != 0) {
        dead.push_back(Leftover{path, std::move(lock), has_index ? st.st_mtim.tv_sec : -1});
      }
    }
  }
  ::closedir(d);
  return dead;
}

void remove_leftover(const Leftover& leftover) {
  std::error_code ec;
  std::filesystem::remove_all(leftover.path, ec);
  log(LogLevel::kInfo, "removed the cache directory of a dead mount: %s", leftover.path.c_str());
}

// Makes root/name empty and locked. Built under a name other mounts do not scan, locked, and
// only then renamed into place: a mount starting at the same moment never sees it without its
// lock held. Returns the directory's and the lock's descriptors.
Result<std::pair<UniqueFd, UniqueFd>> build_locked(const std::string& root,
                                                   const std::string& name) {
  const std::string building = root + "/" + kBuildingPrefix + name;
  const std::string path = root + "/" + name;
  Status s = make_dir(building, 0700);
  if (!s.is_ok()) {
    return s;
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
  UniqueFd lock_fd(::openat(dir_fd.get(), kLockName, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  // Blocking: a concurrent mount may probe a finished directory's lock for an instant.
  if (!lock_fd.valid() || ::flock(lock_fd.get(), LOCK_EX) != 0) {
    return fail("lock");
  }
  if (::rename(building.c_str(), path.c_str()) != 0) {
    return fail("rename");
  }
  return std::make_pair(std::move(dir_fd), std::move(lock_fd));
}

}  // namespace

Result<std::unique_ptr<CacheDir>> CacheDir::adopt(const std::string& from, UniqueFd lock,
                                                  const std::string& path, int removed) {
  // We hold its lock, so no other mount removes or adopts it while we rename it.
  if (::rename(from.c_str(), path.c_str()) != 0) {
    return Status::error(errno, "rename " + from);
  }
  UniqueFd dir_fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) {
    return Status::error(errno, "open " + path);
  }
  auto dir = std::unique_ptr<CacheDir>(new CacheDir(path, std::move(dir_fd), std::move(lock)));
  dir->leftovers_removed_ = removed;
  dir->adopted_ = true;
  dir->keep_ = true;
  log(LogLevel::kInfo, "reusing the cache kept by an earlier mount: %s", path.c_str());
  return dir;
}

Result<std::unique_ptr<CacheDir>> CacheDir::create(const std::string& root,
                                                   const std::string& source_key, bool keep) {
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    std::filesystem::create_directories(std::filesystem::path(root).parent_path(), ec);
    Status s = make_dir(root, 0700);
    if (!s.is_ok()) {
      return s;
    }
  }
  const std::string prefix = source_prefix(source_key);
  const std::string name = prefix + std::to_string(::getpid());
  std::vector<Leftover> dead = find_dead_leftovers(root, prefix);
  // With keep, the newest leftover that has an index is adopted; every other one is removed.
  auto newest = std::max_element(dead.begin(), dead.end(), [](const auto& a, const auto& b) {
    return a.index_mtime < b.index_mtime;
  });
  const bool adopting = keep && newest != dead.end() && newest->index_mtime >= 0;
  int removed = 0;
  for (auto it = dead.begin(); it != dead.end(); ++it) {
    if (!(adopting && it == newest)) {
      remove_leftover(*it);
      ++removed;
    }
  }
  if (adopting) {
    return adopt(newest->path, std::move(newest->lock), root + "/" + name, removed);
  }
  const std::string path = root + "/" + name;
  auto built = build_locked(root, name);
  if (!built.is_ok()) {
    return built.status();
  }
  auto [dir_fd, lock_fd] = std::move(built).value();
  auto dir = std::unique_ptr<CacheDir>(new CacheDir(path, std::move(dir_fd), std::move(lock_fd)));
  dir->leftovers_removed_ = removed;
  dir->keep_ = keep;
  return dir;
}

CacheDir::~CacheDir() {
  if (keep_) {
    return;  // left for the next mount; its lock goes with lock_fd_
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (ec) {
    log(LogLevel::kWarning, "cannot remove the cache directory %s: %s", path_.c_str(),
        ec.message().c_str());
  }
}

std::string CacheDir::object_name(const std::string& source_path) {
  const XXH128_hash_t h = XXH3_128bits(source_path.data(), source_path.size());
  const std::string hex = hex64(h.high64) + hex64(h.low64);
  return hex.substr(0, 2) + "/" + hex;
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
