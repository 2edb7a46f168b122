// The kernel's mount table (/proc/self/mountinfo): what is mounted at a path. Read as text,
// so it never touches the mount itself (a stat of a hung FUSE mount would hang).
#pragma once

#include <istream>
#include <optional>
#include <string>

namespace epochfs::cachestore {

struct MountEntry {
  std::string devno;       // "major:minor" of the mount's device
  std::string mountpoint;  // unescaped
  std::string type;        // "fuse.epochfs", "ext4", ...
};

// The mount on top at path (absolute and canonical) in a mountinfo text, or nullopt.
std::optional<MountEntry> mount_in(std::istream& mountinfo, const std::string& path);

// The same in this process's /proc/self/mountinfo.
std::optional<MountEntry> mount_at(const std::string& path);

// Whether a mountinfo text lists a mount of device devno, anywhere, under or over others.
bool device_in(std::istream& mountinfo, const std::string& devno);

// The same in this process's /proc/self/mountinfo.
bool device_mounted(const std::string& devno);

}  // namespace epochfs::cachestore
