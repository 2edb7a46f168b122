// What kind of filesystem a directory is on, where that changes what epochfs can rely on.
#pragma once

namespace epochfs::cachestore {

// "NFS", "Lustre", "GPFS", "SMB", "CephFS", "9P" or "FUSE" for a filesystem whose files other
// machines (or a FUSE daemon) may change without this kernel knowing, so inotify misses those
// changes; nullptr for a local filesystem. type is statfs's f_type.
const char* network_fs_name(long type);

}  // namespace epochfs::cachestore
