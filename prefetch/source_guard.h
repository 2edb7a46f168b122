// SourceGuard: calls into the shared storage that cannot hang the mount, and the storage's
// health.
//
// Owner: the Engine. Shared storage blinks (a server reboots, a failover, a restarted client).
// A FUSE worker that calls a hung source directly sleeps in the kernel until the source
// returns, and the reader whose request it serves sleeps with it, unkillable. So every call a
// FUSE worker makes into the source runs on this guard's threads, which the mount can afford
// to lose: the caller waits at most a bound, and stops waiting when its reader is killed
// (a Cancel, set by the FUSE layer's interrupt). A call that is not answered within
// timeout_s, or that fails with a transport-level error (is_outage_error), marks the source
// down.
//
// While the source is down, a caller that has an answer of its own (attributes last read, a
// copy of the version last checked) is told so at once, without a call; the others wait for
// the source to come back, at most outage_wait_s from their start, then fail with EIO. A
// prober asks, every kProbePeriod, the source's servers (a statfs of the root, which no client
// answers from a cache) and marks the source up when they answer anything but an outage error.
//
// Health is also kept per path: a call that is not answered marks its path hung as well as the
// source down. Once the root answers, the source is up again for every other path, while the
// hung path (one failed file, a dead nested mount, a directory whose server hangs) costs only
// its own callers: they are answered or wait as in an outage, and no new call of the path is
// made, until the call that hung returns. That call is the path's probe: a stat that answers
// says nothing of an open or a read that hangs, and a new attempt after each would leave one
// more thread stuck each time. At most kMaxHungPaths are kept; past them the source stays down
// as a whole until one of them, or every call not kept, returns.
//
// Copies call the source on the stager's threads directly: they are off every reader's path.
// So does every caller when the source is on a local disk (SourceGuardOptions::direct); its
// errors still mark it down and are answered the same way.
//
// Thread-safety: all methods may be called from any thread. Lock order: mu_ is a leaf lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cachestore/root_dir.h"
#include "cachestore/status.h"
#include "cachestore/sync.h"
#include "prefetch/cancel.h"

namespace epochfs::prefetch {

struct SourceGuardOptions {
  // A call not answered within this marks the source down (--source-timeout). A call slower
  // than a fifth of it makes the source "slow".
  double timeout_s = 5;
  // A caller with no answer of its own waits this long for the source, then fails with EIO
  // (--outage-wait). The default lets a failover of a minute pass.
  double outage_wait_s = 120;
  // Threads that call the source. A hung source holds each call's thread until it returns;
  // beyond these, calls queue, and their callers wait within their own bounds.
  // Made as calls find none idle: as many as the FUSE workers, so that calls never queue
  // behind each other while the source is well.
  unsigned threads = 80;
  // Calls run on the caller's thread: for a source on a local disk (cachestore::is_local_fs),
  // which does not blink as shared storage does, and where a hop to another thread would cost
  // more than the call (a quarter of the overlay's cold read rate, measured).
  bool direct = false;
  // Starts a calling thread; std::thread when empty. Tests inject a failing one: a thread
  // that cannot start (a cgroup's pids.max, RLIMIT_NPROC, memory) fails the call, not the
  // daemon.
  std::function<std::thread(std::function<void()>)> start_thread = nullptr;
};

enum class SourceState { kOk, kSlow, kDown };

const char* to_string(SourceState state);

// A snapshot of the source's health.
struct SourceHealth {
  SourceState state = SourceState::kOk;
  int64_t since_ns = 0;       // when the state began (CLOCK_MONOTONIC); 0 for ok since the mount
  int64_t since_wall_s = 0;   // the same, as a Unix time
  uint64_t outages = 0;       // times the source went down
  uint64_t served_known = 0;  // answers given from what the mount knows, without the source
  uint64_t waited = 0;        // calls that waited for the source to come back, then ran
  uint64_t failed = 0;        // calls that gave up on a source that did not come back
  uint64_t timed_out = 0;     // calls not answered within the timeout
  uint64_t interrupted = 0;   // callers whose reader was killed while they waited
  uint64_t hung_paths = 0;    // paths whose call hangs while the rest of the source answers
  std::string last_error;     // what made it go down last
};

// Transport-level errors: the storage, not the file, is in trouble.
bool is_outage_error(int err);

// Errors after which a caller with an answer of its own gives it: outages, and EIO (what a
// soft-mounted NFS answers when its server does not).
bool answer_instead(int err);

class SourceGuard {
 public:
  static constexpr auto kProbePeriod = std::chrono::milliseconds(500);
  static constexpr size_t kMaxHungPaths = 8;
  // Called when the source comes back (the engine replans its copies).
  using OnRecovery = std::function<void()>;

  SourceGuard(const cachestore::RootDir& source, SourceGuardOptions options);
  ~SourceGuard();
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;

  // Starts the calling threads and the prober (after the daemon's fork). Before it, calls run
  // on the caller's thread.
  void start(OnRecovery on_recovery);

  // Runs f (a call into the source about path) within the bounds above. has_answer: the
  // caller has an answer of its own to give if the source is down; then an outage ends the
  // call at once with an outage error (is_outage_error), and the caller gives that answer
  // (count it with served_known()). It ends with EINTR if the thread's Cancel is set.
  //
  // Each attempt keeps its result in a slot of its own: an attempt abandoned by its caller
  // (timed out, cancelled) that returns later destroys its own result (closing an fd it
  // opened, once) and touches nothing another attempt or the caller holds.
  template <typename T>
  cachestore::Result<T> call(const std::string& path, bool has_answer,
                             std::function<cachestore::Result<T>()> f) {
    std::shared_ptr<void> won;
    cachestore::Status st = run(
        path, has_answer,
        [f = std::move(f)](std::shared_ptr<void>* out) {
          auto slot = std::make_shared<cachestore::Result<T>>(f());
          cachestore::Status s = slot->is_ok() ? cachestore::Status::ok() : slot->status();
          *out = std::move(slot);
          return s;
        },
        &won);
    if (!won || !st.is_ok()) {
      return st;
    }
    return std::move(*std::static_pointer_cast<cachestore::Result<T>>(won));
  }

  // A copy (on the stager) met this error in the source: an outage error marks it down.
  void note(const cachestore::Status& status, const std::string& path);

  // A caller gave an answer of its own during an outage.
  void served_known() { served_known_.fetch_add(1, std::memory_order_relaxed); }

  bool down() const { return state_.load(std::memory_order_acquire) == SourceState::kDown; }

  // Whether path is (or lies under) a path whose call hung while the rest of the source
  // answers.
  bool hung(const std::string& path) const EXCLUDES(mu_);

  SourceHealth health() const;
  // Wakes every waiting caller so that it looks at its Cancel again.
  void wake();
  // The mount is ending: callers waiting for the source to come back fail with EIO now, and
  // later ones do not wait (a call already in the source still gets its timeout).
  void stop_waiting();

 private:
  struct Job;
  struct Shared;

  // A call's work: its status, and its result put in *out (owned by the attempt that made it).
  using Work = std::function<cachestore::Status(std::shared_ptr<void>* out)>;

  // Runs work within the bounds; its status, or the outage's, or EINTR when cancelled. *result
  // gets the result of the attempt whose status is returned, if work ran to its end.
  cachestore::Status run(const std::string& path, bool has_answer, const Work& work,
                         std::shared_ptr<void>* result);
  // One attempt: work on a calling thread, waited for at most the timeout; its result moved to
  // *result. nullopt if it was not answered in time (or cancelled: *cancelled is set). EIO if
  // no thread could be started to run it.
  std::optional<cachestore::Status> attempt(const std::shared_ptr<Job>& job, bool* cancelled,
                                            std::shared_ptr<void>* result);
  // Waits until the source is up and path no longer hung, the deadline passes, or the thread's
  // Cancel is set. True if both are so.
  bool wait_until_clear(const std::string& path, int64_t deadline_ns);
  // Records that stuck, a call about path, was not answered: path is hung until it returns.
  void mark_hung(const std::string& path, const std::shared_ptr<Job>& stuck) EXCLUDES(mu_);
  // Clears the hung paths whose call returned; true if the source as a whole may be up (no
  // call that hung is left unrecorded).
  bool clear_returned() EXCLUDES(mu_);
  // One probe: a statfs of the root; true if it answered.
  bool probe(std::shared_ptr<Job>& job);
  void mark_down(const std::string& why, const std::string& path);
  void mark_up();
  void note_duration(int64_t ns);
  void probe_loop();

  const cachestore::RootDir& source_;
  const SourceGuardOptions options_;
  std::shared_ptr<Shared> shared_;  // the queue and the threads' state; outlives stuck threads
  std::thread prober_;
  OnRecovery on_recovery_;

  std::atomic<SourceState> state_{SourceState::kOk};
  std::atomic<bool> stop_waiting_{false};
  std::atomic<uint64_t> served_known_{0};
  std::atomic<uint64_t> waited_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> timed_out_{0};
  std::atomic<uint64_t> interrupted_{0};

  mutable cachestore::Mutex mu_;  // the state's details; never waited on
  int64_t since_ns_ GUARDED_BY(mu_) = 0;
  int64_t since_wall_s_ GUARDED_BY(mu_) = 0;
  uint64_t outages_ GUARDED_BY(mu_) = 0;
  std::string last_error_ GUARDED_BY(mu_);

  struct HungPath {
    std::string path;
    std::shared_ptr<Job> stuck;  // the call that did not answer
  };

  std::vector<HungPath> hung_ GUARDED_BY(mu_);  // at most kMaxHungPaths
  // Calls that hung when hung_ was full: the source stays down until they return.
  std::vector<std::shared_ptr<Job>> unrecorded_ GUARDED_BY(mu_);
  std::atomic<size_t> hung_count_{0};  // hung_.size(): calls skip mu_ when 0
};

}  // namespace epochfs::prefetch
