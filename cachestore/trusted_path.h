// Trusted paths: whether a directory the daemon keeps copies in can be changed by another user.
//
// A root daemon serves its copies to every user of the mount, so whoever can change the cache
// root, or rename something on the way to it, can make it serve bytes of their choosing: plant
// a "kept" directory whose index vouches for forged copies (--keep-cache), or swap a directory
// the daemon writes into. The rule is sshd's StrictModes (OpenSSH misc.c, safe_path): every
// directory from / down to the cache root is owned by root or by the daemon's user, and no
// group or other user may write it. One exception sshd does not make: like /tmp, a root-owned
// directory with the sticky bit may be writable by all above the cache root, since there no
// one may rename or remove what they do not own. The cache root itself must be the daemon
// user's own and writable by it alone. A symlink on the way counts as its owner's: it must be
// root's or the daemon user's, and the directories it leads through are checked as well. ACLs
// are not looked at.
//
// A kept directory (--keep-cache) is checked the same way before it is adopted: it, its
// fan-out directories and its index must be the daemon user's and writable by it alone.
//
// Thread-safety: free functions with no shared state. They read the filesystem as it is now;
// a path that passes cannot be changed afterwards by anyone but root and uid.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

#include "cachestore/status.h"

namespace epochfs::cachestore {

// Ok if no user but root and uid can change what path, an existing cache root, names or holds
// (see above). Otherwise an error (EPERM) whose context says what is wrong and how to fix it.
Status check_cache_root(const std::string& path, uid_t uid);

// The same for the directories above root, a cache root not made yet: path, existing, is the
// nearest of them, and gets the rule of a directory above the root. For `epochfs doctor`.
Status check_cache_root_parent(const std::string& path, const std::string& root, uid_t uid);

// Ok if the kept directory dir_fd (at path, for messages), its entries and the entries of its
// fan-out directories but the copies (regular files in them) are uid's and writable by uid
// alone. The copies are checked one by one as they are adopted (trusted_copy).
Status check_kept_dir(int dir_fd, const std::string& path, uid_t uid);

// Whether st, a copy in a kept directory, is a regular file of uid's that no one else may
// write.
bool trusted_copy(const struct stat& st, uid_t uid);

}  // namespace epochfs::cachestore
