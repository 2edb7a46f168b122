#include "cachestore/fs_type.h"

#include <linux/magic.h>

namespace epochfs::cachestore {
namespace {

// Magic numbers that linux/magic.h does not all name.
constexpr long kLustreMagic = 0x0BD00BD0;
constexpr long kGpfsMagic = 0x47504653;
constexpr long kCifsMagic = 0xFF534D42;
constexpr long kSmb2Magic = 0xFE534D42;
constexpr long kCephMagic = 0x00C36400;
constexpr long kNineP = 0x01021997;
constexpr long kFuseMagic = 0x65735546;
constexpr long kZfsMagic = 0x2FC12FC1;

}  // namespace

const char* network_fs_name(long type) {
  switch (type) {
    case NFS_SUPER_MAGIC:
      return "NFS";
    case kLustreMagic:
      return "Lustre";
    case kGpfsMagic:
      return "GPFS";
    case kCifsMagic:
    case kSmb2Magic:
      return "SMB";
    case kCephMagic:
      return "CephFS";
    case kNineP:
      return "9P";
    case kFuseMagic:
      return "FUSE";
    default:
      return nullptr;
  }
}

bool is_local_fs(long type) {
  switch (type) {
    case EXT4_SUPER_MAGIC:  // ext2 and ext3 too
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case kZfsMagic:
      return true;
    default:
      return false;
  }
}

}  // namespace epochfs::cachestore
