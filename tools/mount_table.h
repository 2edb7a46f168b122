// Reading the kernel's mount table (/proc/self/mountinfo).
#pragma once

#include <optional>
#include <string>

namespace epochfs::tools {

// The filesystem type ("fuse.epochfs", "ext4", ...) mounted exactly at path, or nullopt if
// path is not a mount point. path must be absolute and canonical.
std::optional<std::string> mount_type_at(const std::string& path);

// Absolute form of path without resolving symlinks in a way that touches a dead mount:
// realpath of the parent joined with the last component.
std::string absolute_path(const std::string& path);

}  // namespace epochfs::tools
