// The mount's life: from options to a served mount, and back (fusefs/session.cc).
#pragma once

#include "fusefs/mount_options.h"

namespace epochfs::fusefs {

// Mounts, serves until unmounted or signalled (SIGINT, SIGTERM, SIGHUP), then unmounts.
// Unless options.foreground, the process daemonizes once the mount is in place and the parent
// returns 0. Returns the process exit code; prints a one-line reason on failure.
int run_mount(const MountOptions& options);

}  // namespace epochfs::fusefs
