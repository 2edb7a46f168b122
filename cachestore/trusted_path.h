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

}  // namespace epochfs::cachestore
