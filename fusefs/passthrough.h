// Kernel FUSE passthrough: the kernel reads a cached copy (or, for a file not cached yet, the
// source file) itself, so no READ request reaches the daemon and the file's pages are cached
// once (the backing file's own page cache).
//
// The kernel ABI (Linux >= 6.9, FUSE protocol 7.40, include/uapi/linux/fuse.h): INIT offers
// FUSE_PASSTHROUGH in flags2 and the reply accepts it with max_stack_depth; a backing file is
// registered with ioctl(FUSE_DEV_IOC_BACKING_OPEN) on the FUSE device (needs CAP_SYS_ADMIN),
// and an OPEN reply with FOPEN_PASSTHROUGH and its backing_id makes that open read from it.
// The kernel keeps one backing file per inode while any passthrough open of it exists, and
// refuses (EIO to the reader) a passthrough open of an inode open in cached mode, a
// cached-mode open of one open in passthrough, a second backing file for the same inode, and
// (measured on 6.18) FOPEN_KEEP_CACHE with FOPEN_PASSTHROUGH: begin_open and the reply keep
// to those rules.
//
// Written against libfuse 3.14, which knows none of this (3.17 has fuse_passthrough_open):
// fuse_session_custom_io() puts our read and writev between libfuse and the device, so the
// INIT request can be inspected and the INIT and OPEN replies completed on their way out.
// When libfuse's own API can be used, this file is what to replace. The same custom I/O
// carries FUSE over io_uring when asked for (fusefs/uring_transport.h).
//
// Thread-safety: everything may be called from any FUSE worker.
#pragma once

#include <cstdint>

#include "fusefs/data_path.h"
#include "fusefs/fuse_ops.h"
#include "fusefs/passthrough_opens.h"

namespace epochfs::fusefs::passthrough {

// Puts the custom I/O on se, whose mount is in place (fuse_session_mount). With kClassic it
// does nothing. False if libfuse refused the custom I/O (then the mount stays classic).
bool install(fuse_session* se, DataPath path);

// True once INIT negotiated passthrough and no backing registration failed for lack of
// privilege since.
bool active();

// Why passthrough is not active, for the log and the stats ("" when it is).
const char* why_not();

// How an open of inode ino is to be read: by the kernel from a backing file, or the classic
// way (backing_id 0). fd is the file the open serves, of kind backing. It is registered as the
// inode's backing file unless the inode is open in cached mode now: a miss is then read by the
// kernel from the source as a hit is from the copy, with no READ reaching the daemon (the copy
// is made from a descriptor of its own). The rules per inode: fusefs/passthrough_opens.h.
// Every call is matched by one end_open.
Opened begin_open(uint64_t ino, int fd, Backing backing, const cachestore::FileVersion& version);

// An open of ino ends. The inode's backing file is unregistered with its last passthrough
// open (the kernel keeps its own reference for as long as it reads from it).
void end_open(uint64_t ino, uint32_t backing_id);

// Backing files registered now (each pins one file in the kernel).
uint64_t backing_files();

// fuse_reply_open, with FOPEN_PASSTHROUGH and backing_id in the reply when backing_id != 0.
int reply_open(fuse_req_t req, const fuse_file_info* fi, uint32_t backing_id);

// Opens answered with passthrough since the mount.
uint64_t opens();

// Those of them whose reads the kernel serves from a source file rather than a cached copy.
uint64_t source_opens();

}  // namespace epochfs::fusefs::passthrough
