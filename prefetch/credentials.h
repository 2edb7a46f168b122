// Credentials: whose rights an order is staged with.
//
// A root daemon shared by every user must not read a file into its cache for a user who may not
// read it: that would leak, through the user's own counters, that a file they cannot see
// exists, and let them push others' private files through the cache. So an entry of an order
// is staged only if its publisher may read it, decided by the kernel itself: this thread's
// filesystem ids and groups become the publisher's for one access check (faccessat2 with
// AT_EACCESS: modes, ACLs and every directory on the way), then become the daemon's again.
// setfsuid, setfsgid and setgroups are called as raw system calls, which change only the
// calling thread (glibc's setgroups would change every thread of the process).
//
// Thread-safety: may_read_as changes only the calling thread's credentials, for the call.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "cachestore/root_dir.h"

namespace epochfs::prefetch {

struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary

  // Of thread tid, as the kernel gave uid and gid with its request: the supplementary groups
  // are read from /proc. If the thread is gone or its ids no longer match, none (the
  // narrower rights).
  static Credentials of(uid_t uid, gid_t gid, pid_t tid);

  // Differs between users, primary groups and supplementary group sets, and is never 0: a
  // 32-bit hash, so two sets may share one (prefetch/rights_checked.h says what that costs).
  uint32_t fingerprint() const;
};

// Ok if creds may read rel below root: the kernel's decision, with their path walk; else why
// not (EACCES, ENOENT, ...).
cachestore::Status may_read_as(const cachestore::RootDir& root, const std::string& rel,
                               const Credentials& creds);

}  // namespace epochfs::prefetch
