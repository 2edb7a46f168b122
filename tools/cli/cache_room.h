// The room on a cache directory's filesystem, counted as the mount counts it: `epochfs doctor`
// checks what is usable now, `epochfs mount` warns when --cache-size passes all it could hold.
#pragma once

#include <optional>
#include <string>

namespace epochfs::tools {

struct CacheRoom {
  std::string dir;     // the cache dir, or the nearest existing directory above it
  long fs_type = 0;    // statfs's f_type
  double total = 0;    // bytes of the filesystem
  double free = 0;     // bytes this user may still write
  double reserve = 0;  // bytes the mount leaves free (--cache-reserve)

  // What the cache could ever take, and what it can take now.
  double holds() const { return total - reserve; }

  double usable() const { return free > reserve ? free - reserve : 0; }
};

// The room for a cache at path (made at mount if missing); nullopt with errno set if the
// filesystem cannot be asked.
std::optional<CacheRoom> cache_room(const std::string& path, double reserve_fraction);

}  // namespace epochfs::tools
