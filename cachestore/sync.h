// Synchronisation primitives for all of epochfs, with clang thread-safety annotations.
//
// Every module takes its mutexes from here, so that clang's -Wthread-safety (preset clang-tsa)
// checks GUARDED_BY / REQUIRES / ACQUIRED_BEFORE everywhere. With g++ the annotations compile
// away. Modelled on leveldb port/thread_annotations.h and mountpoint-s3 src/sync.rs.
#pragma once

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#if defined(__clang__)
#define EPOCHFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define EPOCHFS_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) EPOCHFS_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY EPOCHFS_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) EPOCHFS_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) EPOCHFS_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) EPOCHFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) EPOCHFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) EPOCHFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) EPOCHFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) EPOCHFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define EXCLUDES(...) EPOCHFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS EPOCHFS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace epochfs::cachestore {

// Names the calling thread (at most 15 characters), as `top -H`, perf and
// /proc/<pid>/task/*/comm show it: an operator sees which of the daemon's threads is busy.
inline void name_this_thread(const char* name) { ::prctl(PR_SET_NAME, name, 0, 0, 0); }

// Makes the calling thread background work: nice 10 and the lowest best-effort I/O priority,
// so that readers win the CPU and the disk; threads it starts later inherit both. For the
// stager's copies, the removal of dead mounts' caches and verify. A thread cannot take the
// priority back without CAP_SYS_NICE, so lower only threads that do nothing else. Failures
// are harmless: the work then competes as an equal.
inline void lower_this_thread_priority() {
  constexpr int kNice = 10;
  constexpr int kIoprioClassBestEffort = 2;  // IOPRIO_CLASS_BE, linux/ioprio.h
  constexpr int kIoprioLowest = 7;
  constexpr int kIoprioClassShift = 13;
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  ::setpriority(PRIO_PROCESS, tid, kNice);
  ::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, static_cast<int>(tid),
            (kIoprioClassBestEffort << kIoprioClassShift) | kIoprioLowest);
}

// The monotonic clock, in nanoseconds, that every timeout and age in epochfs is measured on.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The CPU time the calling thread has used, in nanoseconds: what a piece of work cost the
// daemon, to charge it to whoever asked for it.
inline int64_t thread_cpu_ns() {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }

  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Scoped lock. Hold it for memory work only: never across a syscall, a reply or a call into
// another module (STYLE.md section 5).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }

  ~MutexLock() RELEASE() { mu_.unlock(); }

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Condition variable bound to one Mutex.
class CondVar {
 public:
  explicit CondVar(Mutex* mu) : mu_(mu) {}

  // REQUIRES: *mu_ held. Releases it while waiting.
  void wait() NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  template <typename Rep, typename Period>
  void wait_for(std::chrono::duration<Rep, Period> d) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait_for(lock, d);
    lock.release();
  }

  void notify_one() { cv_.notify_one(); }

  void notify_all() { cv_.notify_all(); }

 private:
  Mutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace epochfs::cachestore
