// FUSE over io_uring (Linux 6.14+, the fuse module's enable_uring parameter), as a transport
// of our own under libfuse 3.14 (which knows nothing of it). Opt-in: --fuse-transport uring.
//
// The kernel's protocol (fs/fuse/dev_uring.c): INIT offers FUSE_OVER_IO_URING in flags2 and
// the reply accepts it; the daemon then registers ring entries (a header buffer and a payload
// buffer each) for every queue, one queue per possible CPU. From then on the kernel puts each
// request of a CPU into a free entry of its queue and completes that entry's command; the
// daemon answers by writing the reply into the same entry and committing it, which also
// re-arms the entry (FUSE_IO_URING_CMD_COMMIT_AND_FETCH). FORGET, INTERRUPT and requests made
// before the entries were ready still come by /dev/fuse, and notifications go there.
//
// Under libfuse 3.14 it sits behind fuse_session_custom_io (fusefs/passthrough.cc holds the
// custom I/O): the `read` callback returns a request rebuilt in /dev/fuse's format, whether
// it came from the ring or the device, and the `writev` callback sends a reply to the entry its
// request came in (by its unique) or to the device. The FUSE workers take turns waiting on the
// ring's completions, as they take turns in read(2) on the device, so a slow request never
// holds up a queue. Each request costs two copies more than /dev/fuse (into libfuse's buffer,
// and the reply into the entry): what the measurement in docs/benchmarks.md weighs.
//
// Thread-safety: every function may be called from any FUSE worker.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace epochfs::fusefs::uring {

// Asks for the transport (before the session serves); it is used if INIT offers it and the
// machine has no more CPUs than max_workers (each CPU's queue needs a worker of its own).
void want(unsigned max_workers);
bool wanted();

// Whether requests come by the ring now.
bool active();
// Why not (for the log and the stats; "" when active).
const char* why_not();

// Requests that came by the ring, and by the device while the ring was in use.
uint64_t ring_requests();
uint64_t device_requests();

// The custom I/O's hooks. Notes the kernel's INIT request (does it offer the ring?).
void inspect_request(const void* buf, size_t len);
// Accepts the ring in the INIT reply if offered (iov[1] is struct fuse_init_out); true if
// accepted: then start() must follow the reply's write.
bool accept_in_init_reply(struct iovec* iov, int count);
// Registers the entries, after the INIT reply that accepted the ring reached the kernel.
void start(int dev_fd);

// The next request, in /dev/fuse's format, into buf: from the ring or from the device. -1
// with errno EAGAIN or EINTR when none came in a while (the worker looks whether to stop),
// ENODEV when the connection ended.
ssize_t read(int dev_fd, void* buf, size_t len);
// Sends a reply: to the entry its request came in, or to the device.
ssize_t writev(int dev_fd, const struct iovec* iov, int count);

// Whether a queue has no worker waiting: the pool should start one (it will serve that queue).
bool wants_worker();

}  // namespace epochfs::fusefs::uring
