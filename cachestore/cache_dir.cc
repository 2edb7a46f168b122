#include "cachestore/cache_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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

// True if another live mount holds dir's lock.
bool is_alive(const std::string& dir) {
  UniqueFd lock(::open((dir + "/" + kLockName).c_str(), O_RDONLY | O_CLOEXEC));
  if (!lock.valid()) {
    return false;  // no lock file: a mount that died while creating its directory
  }
  return ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

int remove_dead_leftovers(const std::string& root, const std::string& prefix) {
  std::vector<std::string> dead;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    return 0;
  }
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && !is_alive(root + "/" + name)) {
      dead.push_back(root + "/" + name);
    }
  }
  ::closedir(d);
  for (const auto& dir : dead) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    log(LogLevel::kInfo, "removed the cache directory of a dead mount: %s", dir.c_str());
  }
  return static_cast<int>(dead.size());
}

}  // namespace

Result<std::unique_ptr<CacheDir>> CacheDir::create(const std::string& root,
                                                   const std::string& source_key) {
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    std::filesystem::create_directories(std::filesystem::path(root).parent_path(), ec);
    Status s = make_dir(root, 0700);
    if (!s.is_ok()) {
      return s;
    }
  }
  const std::string prefix = source_prefix(source_key);
  const int removed = remove_dead_leftovers(root, prefix);
  const std::string path = root + "/" + prefix + std::to_string(::getpid());
  Status s = make_dir(path, 0700);
  if (!s.is_ok()) {
    return s;
  }
  UniqueFd dir_fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) {
    return Status::error(errno, "open " + path);
  }
  UniqueFd lock_fd(::openat(dir_fd.get(), kLockName, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_fd.valid() || ::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return Status::error(errno, "lock " + path);
  }
  auto dir = std::unique_ptr<CacheDir>(new CacheDir(path, std::move(dir_fd), std::move(lock_fd)));
  dir->leftovers_removed_ = removed;
  return dir;
}

CacheDir::~CacheDir() {
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
  return hex.substr(0, 2) + "/" + hex.substr(2, 2) + "/" + hex;
}

Status CacheDir::make_parents(const std::string& name) const {
  // name is "ab/cd/<hex>": two fan-out levels, created on first use.
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
