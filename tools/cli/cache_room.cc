#include "tools/cli/cache_room.h"

#include <sys/stat.h>
#include <sys/statfs.h>

namespace epochfs::tools {

namespace {

// The nearest existing directory at or above path (the cache dir is created at mount).
std::string existing_dir(std::string path) {
  struct stat st;
  while (!path.empty() && ::stat(path.c_str(), &st) != 0) {
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return path;
}

}  // namespace

std::optional<CacheRoom> cache_room(const std::string& path, double reserve_fraction) {
  CacheRoom room;
  room.dir = existing_dir(path);
  struct statfs fs;
  if (::statfs(room.dir.c_str(), &fs) != 0) {
    return std::nullopt;
  }
  // In fragments, as the cache store counts (f_bsize is only the preferred I/O size).
  const auto block = static_cast<double>(fs.f_frsize != 0 ? fs.f_frsize : fs.f_bsize);
  room.fs_type = static_cast<long>(fs.f_type);
  room.total = static_cast<double>(fs.f_blocks) * block;
  room.free = static_cast<double>(fs.f_bavail) * block;
  room.reserve = room.total * reserve_fraction;
  return room;
}

}  // namespace epochfs::tools
