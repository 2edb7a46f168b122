// The kernel's mount table (/proc/self/mountinfo): what is mounted where, and detaching.
#pragma once

#include <optional>
#include <string>

namespace epochfs::tools {

// The filesystem type ("fuse.epochfs", "ext4", ...) mounted exactly at path, or nullopt if
// path is not a mount point. path must be absolute and canonical.
std::optional<std::string> mount_type_at(const std::string& path);

// The FUSE connection number of the mount at path (its device's minor), or nullopt if path is
// not a FUSE mount. Read from the mount table: it never touches the mount itself.
std::optional<unsigned> fuse_connection_at(const std::string& path);

// Aborts a FUSE connection through fusectl (mounted at /sys/fs/fuse/connections if it is not):
// every request waiting on it fails with ENOTCONN at once, even with a daemon that no longer
// answers. The kernel's "always works" way out of a hung mount; needs root.
bool abort_fuse_connection(unsigned connection);

// True if a FUSE mount at path has lost its daemon: the kernel answers ENOTCONN. Asked with
// statfs, which the kernel never answers from its caches (a stat may be).
bool is_dead_mount(const std::string& path);

// Detaches the mount at path now (umount2 MNT_DETACH; a non-root user's FUSE mount through
// `fusermount3 -uz`). On failure returns false with errno set.
bool detach_mount(const std::string& path);

// Unmounts path, or detaches it if it is busy (root only; errors ignored): for teardown.
void unmount_or_detach(const std::string& path);

// Absolute form of path without resolving symlinks in a way that touches a dead mount:
// realpath of the parent joined with the last component.
std::string absolute_path(const std::string& path);

}  // namespace epochfs::tools
