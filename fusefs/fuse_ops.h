// The libfuse low-level operation table. Only fusefs/ includes libfuse.
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

namespace epochfs::fusefs {

// userdata for the session must be a Filesystem*.
const struct fuse_lowlevel_ops& fuse_operations();

// Standard connection options given with -o (splice_write, ...), applied at INIT after ours.
void set_conn_info_opts(struct fuse_conn_info_opts* opts);

}  // namespace epochfs::fusefs
