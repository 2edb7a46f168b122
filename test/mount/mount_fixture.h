// Test fixtures for real FUSE mounts.
//
// Mount starts `epochfs mount --foreground` as a child (which gets SIGTERM if the test process
// dies), waits until the kernel lists the mount, and always tears it down in its destructor:
// unmount, then lazy unmount, then SIGKILL after a timeout. TempDir removes its tree only
// after every mount inside it is gone.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/lab/process.h"

namespace epochfs::test {

inline constexpr auto kMountTimeout = std::chrono::seconds(20);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class Mount {
 public:
  // Mounts source at mountpoint (created if missing) with extra `epochfs mount` arguments.
  // The cache goes to mountpoint + ".cache" unless extra_args name a --cache-dir.
  // launcher, if given, runs the daemon (e.g. {"prlimit", "--nofile=256:256", "--"}).
  Mount(const std::string& source, const std::string& mountpoint,
        const std::vector<std::string>& extra_args = {},
        const std::vector<std::string>& launcher = {});
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  const std::string& path() const { return mountpoint_; }

  std::string operator/(const std::string& name) const { return mountpoint_ + "/" + name; }

  pid_t pid() const { return pid_; }

  std::string cache_root() const { return mountpoint_ + ".cache"; }

  // Waits for the daemon to exit (after an unmount or a signal) and returns its exit code.
  std::optional<int> wait_exit();

 private:
  std::string mountpoint_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Slow shared storage: epochfs-slowfs serving source at mountpoint, each open and read
// answered after latency_ms; more of slowfs's options in `more` (--bandwidth-mbs). Unmounted in
// the destructor, like Mount.
class SlowSource {
 public:
  SlowSource(const std::string& source, const std::string& mountpoint, double latency_ms,
             unsigned max_inflight = 64, const std::vector<std::string>& more = {});
  SlowSource(const SlowSource&) = delete;
  SlowSource& operator=(const SlowSource&) = delete;

  const std::string& path() const { return mountpoint_; }

  pid_t pid() const { return daemon_.pid(); }

  // Times rel_path was opened on this source ("" for all files).
  uint64_t opens(const std::string& rel_path = "") const;

  // The most read requests that waited for their replies at once.
  uint64_t most_reads() const;

 private:
  std::string mountpoint_;
  tools::MountedDaemon daemon_;
};

// epochfs-faultfs serving source at mountpoint (test/fixtures/faultfs/faultfs.cc): rules set at run
// time make chosen operations fail, wait, hang, read short or change the file. The destructor
// releases hung requests, drops the rules and unmounts, like SlowSource.
class FaultFs {
 public:
  FaultFs(const std::string& source, const std::string& mountpoint);
  ~FaultFs();
  FaultFs(const FaultFs&) = delete;
  FaultFs& operator=(const FaultFs&) = delete;

  const std::string& path() const { return mountpoint_; }

  // Replaces the rules (a failed check if they do not parse).
  void set_rules(const std::string& rules);
  bool try_set_rules(const std::string& rules);

  // Lets every request hung now go on. A request arriving later still meets the hang rules:
  // clear them first.
  void release();

  // The counters as JSON: {"injected": N, "paths": {"/f0": {"opens": .., "reads": .., "bytes":
  // ..}}}.
  std::string stats() const;
  // Faults injected so far (each hang counted when its request arrives).
  uint64_t injected() const;

  // Stops and continues the daemon: meanwhile its mount hangs, as a hard-mounted NFS whose
  // server is down does.
  void pause() { daemon_.pause(); }

  void resume() { daemon_.resume(); }

  // Kills the daemon: its mount answers ENOTCONN from then on, as a dead network client's.
  void kill_daemon() const { ::kill(daemon_.pid(), SIGKILL); }

 private:
  std::string mountpoint_;
  tools::MountedDaemon daemon_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs the epochfs binary with args and waits for it.
CommandResult run_epochfs(const std::vector<std::string>& args);

// Runs the lab's binary (epochfs-lab: bench, demo) with args and waits for it.
CommandResult run_lab(const std::vector<std::string>& args);

// Runs argv (argv[0] looked up in PATH) and waits for it.
CommandResult run_command(const std::vector<std::string>& argv);

// True if a filesystem is mounted exactly at path.
bool is_mounted(const std::string& path);

// Reads a whole file; nullopt on error (errno kept).
std::optional<std::string> read_file(const std::string& path);

// The resident memory of process pid in KiB (VmRSS), -1 if unknown.
double rss_kib(pid_t pid);

// A number in the mount's .epochfs/stats (a failed check if absent).
double stat_of(const Mount& mount, const std::string& key);

// Writes text into <mount>/.epochfs/name and closes it; the errno of the first failed write or
// of the close (0 when the order was published). With cuts (ascending offsets), one write()
// per piece between them.
int publish(const Mount& mount, const std::string& text, const std::string& name = "order",
            std::vector<size_t> cuts = {});

// publish() with plain calls only (no Catch2 checks), for a child process: 0, or the errno of
// the step that failed.
int write_order(const Mount& mount, const std::string& text);

// Waits until the mount has no copy queued or running (staging is asynchronous).
void wait_for_staging(const Mount& mount);

// Polls key until it reaches at least want (events are counted by the daemon's threads), or
// with kFalls at most want (what the daemon frees), for at most ten seconds; returns the last
// value.
enum class Until { kRises, kFalls };
double wait_for_stat(const Mount& mount, const std::string& key, double want,
                     Until until = Until::kRises);

// Files root/f0 .. f<count-1> of `size` bytes whose content names (file, version, offset).
void write_files(const std::string& root, int count, uint64_t size, uint32_t version = 1);

// Checks that two files have the same bytes.
void check_same(const std::string& a, const std::string& b);

// check_same for f0 .. f<count-1> of two directories (files made by write_files).
void check_files(const std::string& a_root, const std::string& b_root, int count);

// A source with one file, hello.txt, holding "hello".
void make_small_source(const std::string& src);

// A tmpfs mounted at path (created if missing) with mount options and flags; unmounted
// (lazily if need be) even if the test fails.
class Tmpfs {
 public:
  Tmpfs(const std::string& path, const std::string& options, unsigned long flags = 0);
  ~Tmpfs();
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A read-only bind mount of a directory: the reference for the errno a read-only view of the
// source gives for each operation. Unmounted in the destructor.
class ReadOnlyBind {
 public:
  ReadOnlyBind(const std::string& source, const std::string& target);
  ~ReadOnlyBind();
  ReadOnlyBind(const ReadOnlyBind&) = delete;
  ReadOnlyBind& operator=(const ReadOnlyBind&) = delete;

  const std::string& path() const { return target_; }

 private:
  std::string target_;
};

// Why this kernel cannot serve FUSE passthrough (Linux 6.9 or later), or nullopt if it can.
// EPOCHFS_TEST_DENY_PASSTHROUGH (which makes the daemon act as on an older kernel) counts as
// missing too, so the skips can be checked on a new kernel.
std::optional<std::string> passthrough_missing();

// At the top of a test that needs kernel passthrough: skips it, saying why, on older kernels
// (Debian 12's own is 6.1). Catch2 v2 has no skip: the test passes with a SKIPPED warning.
#define SKIP_WITHOUT_PASSTHROUGH()                                   \
  do {                                                               \
    if (auto why_missing = ::epochfs::test::passthrough_missing()) { \
      WARN("SKIPPED: " << *why_missing);                             \
      return;                                                        \
    }                                                                \
  } while (false)

// Runs fn as user and group `nobody` in a child process and returns what it returned (0..255).
int run_as_nobody(const std::function<int()>& fn);
// The same as an ordinary user uid (its group: gid uid, no other groups): two such users are
// two tenants of a shared mount.
int run_as(uid_t uid, const std::function<int()>& fn);
// Makes this process user uid as run_as does (group uid, no supplementary groups unless
// given); false if it could not.
bool become_user(uid_t uid, const std::vector<gid_t>& groups = {});
inline constexpr uid_t kNobody = 65534;

// False when the suite runs with --data-path no-open (EPOCHFS_TEST_DATA_PATH): the kernel then
// opens an existing file without asking the daemon, so an open for writing succeeds there and
// its writes fail instead (no_open_test.cc checks them).
bool opens_reach_daemon();

}  // namespace epochfs::test
