// What kind of filesystem a directory is on, where that changes what epochfs can rely on.
#pragma once

namespace epochfs::cachestore {

// "NFS", "Lustre", "GPFS", "SMB", "CephFS", "9P" or "FUSE" for a filesystem whose files other
// machines (or a FUSE daemon) may change without this kernel knowing, so inotify misses those
// changes; nullptr for a local filesystem. type is statfs's f_type.
const char* network_fs_name(long type);

// True for a filesystem on this machine's own disks or memory (ext2/3/4, XFS, Btrfs, F2FS,
// ZFS, tmpfs): opening one of its files again costs no request to another machine. False for
// the rest, unknown types included.
bool is_local_fs(long type);

}  // namespace epochfs::cachestore
