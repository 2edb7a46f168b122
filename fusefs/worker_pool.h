// The threads that serve a FUSE session's requests, in place of fuse_session_loop_mt().
//
// libfuse 3.14's loop ends its workers with pthread_cancel(), which is only safe if no worker
// can be cancelled holding a lock (of libc, a sanitizer's runtime, or ours): a daemon once hung
// in that loop after its unmount. These workers leave on their own instead: the kernel ending
// the connection (unmount, abort) wakes every one of them with an error, and a session told to
// exit (SIGTERM, SIGINT, SIGHUP through libfuse's handlers) wakes the idle ones from their
// blocking read with a signal.
#pragma once

#include <functional>

struct fuse_session;

namespace epochfs::fusefs {

// Serves `se` with up to `max_threads` workers, started as requests find none idle, until the
// connection ends or the session is told to exit. Returns 0, or a negative errno when reading
// the device failed for another reason. Requests being served when it ends are finished;
// on_stop is called once it is ending, before they are waited for.
int serve_requests(fuse_session* se, unsigned max_threads,
                   const std::function<void()>& on_stop = {});

}  // namespace epochfs::fusefs
