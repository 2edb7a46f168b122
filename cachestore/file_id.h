// FileId: the dense id of a source file, assigned by the prefetch engine's registry for the life
// of a mount (prefetch/file_registry.h). The cache index, the schedule and the policies use it
// as an array index. Its own header: most users need the integer, not the eviction policy.
#pragma once

#include <cstdint>

namespace epochfs::cachestore {

using FileId = uint32_t;

}  // namespace epochfs::cachestore
