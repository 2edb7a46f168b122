// The kernel's mount table (/proc/self/mountinfo): what is mounted at a path. Read as text,
// so it never touches the mount itself (a stat of a hung FUSE mount would hang).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace epochfs::cachestore {

struct MountEntry {
  std::string devno;  // "major:minor" of the mount's device
  std::string type;   // "fuse.epochfs", "ext4", ...
};

// The mount on top at path (absolute and canonical) in a mountinfo text, or nullopt.
std::optional<MountEntry> mount_in(std::string_view mountinfo, const std::string& path);

// The same in this process's /proc/self/mountinfo.
std::optional<MountEntry> mount_at(const std::string& path);

}  // namespace epochfs::cachestore
