#include "cachestore/file_version.h"

#include <xxhash.h>

namespace epochfs::cachestore {

uint64_t FileVersion::digest() const {
  const int64_t fields[] = {size, mtime_ns, ctime_ns, static_cast<int64_t>(ino),
                            static_cast<int64_t>(dev)};
  return XXH3_64bits(fields, sizeof(fields));
}

}  // namespace epochfs::cachestore
