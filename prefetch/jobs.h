// Jobs: who owns each stream and manifest on a mount shared by many jobs and users, when a
// job has ended, and the limits that keep one job or user from starving the others.
//
// A job is (user, name). The name is the order's `#job` directive, or, without one, the
// writer's session ("session-<sid>"): a shell's `cp` and `epochfs publish` land in the job of
// the shell they ran from. Streams and manifests are the job's own: two jobs may both call
// their ranks rank0, and nobody can name another user's job (the user comes from the kernel,
// not from the order). docs/semantics.md, "A mount shared by jobs", is the contract.
//
// A job ends when the processes that anchor it have all exited: for a named job, every process
// that published for it; for a session job, the session's leader (the shell). Process
// identities carry their start time, so a reused pid never keeps a job alive. A job with no
// publish and no open of its files for the idle timeout ends too. The mount's own job
// (--shuffle-file) never ends.
//
// Thread-safety: none; the Planner owns it under its lock. Reading /proc (alive) is done by
// the caller outside that lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cachestore/file_id.h"
#include "cachestore/status.h"
#include "prefetch/credentials.h"

namespace epochfs::prefetch {

using cachestore::FileId;

// A process, named so that a reused pid is a different process.
struct ProcessRef {
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22

  bool operator==(const ProcessRef&) const = default;
};

// The process (thread group) of thread tid, if it still runs.
std::optional<ProcessRef> process_of(pid_t tid);
// True while p runs (its pid exists with the same start time).
bool alive(const ProcessRef& p);

// Who wrote an upload, from the FUSE request that created it.
struct Publisher {
  uid_t uid = 0;
  Credentials creds;  // whose rights its orders are staged with (prefetch/credentials.h)
  std::optional<ProcessRef> process;  // the writing process
  std::optional<ProcessRef> leader;   // its session's leader
  pid_t sid = 0;
  bool is_mount = false;  // the mount itself (--shuffle-file): its job never ends

  // Reads what it needs of tid from /proc now, while the writer is known to run.
  static Publisher of(uid_t uid, gid_t gid, pid_t tid);
  static Publisher mount();
};

struct JobLimits {
  size_t streams_per_job = 64;
  size_t jobs_per_user = 64;
  // Streams all of one user's jobs hold: below the mount's Schedule::kMaxStreams, so that no
  // one user can take every stream.
  size_t streams_per_user = 256;
  // Order entries (8 bytes each) and manifest entries (4 bytes) one user's jobs hold.
  uint64_t entries_per_user = uint64_t{64} << 20;
  // The same, all users' jobs together (the mount's own --shuffle-file aside): above the
  // per-user limit, so that the orders users publish hold at most 2 GiB.
  uint64_t entries = uint64_t{256} << 20;
  // Memory the uploads one user is writing may hold (entries and new paths), and all users'
  // together: checked at each write, so an upload held open cannot grow without bound.
  uint64_t upload_bytes_per_user = uint64_t{256} << 20;
  uint64_t upload_bytes = uint64_t{1} << 30;
  // Memory of the paths one user's orders add to the path registry, and all users' together.
  // The registry keeps a path for the mount's life, so what a user adds stays charged to
  // them: below the registry's 4 GiB of paths, so that no user can exhaust it for others.
  uint64_t path_bytes_per_user = uint64_t{2} << 30;
  uint64_t path_bytes = uint64_t{3} << 30;
  // A job with no publish and no open of its streams' files for this long ends.
  double idle_timeout_s = 3600;
  // The daemon's CPU time one user's uploads (parsing, registering, publishing) may take: a
  // burst of this many seconds, refilled at `publish_cpu_share` of one core. An ImageNet-21k
  // order (14 M paths) takes ~7 s; past the bucket, the user's next upload is refused.
  double publish_cpu_burst_s = 20;
  double publish_cpu_share = 0.1;
};

// A published manifest: each entry line's id (Planner::kNoFile where rejected: index i names
// line i) and, for the lines of ranges that cross a block's end, how many blocks follow the
// line's id, the range's first block (the index orders over it stage them all).
struct Manifest {
  struct Span {
    uint32_t line;
    uint32_t more;  // blocks after the first: at most kMaxRangeBytes / kBlockBytes
  };

  std::vector<FileId> ids;
  std::vector<Span> spans;  // by line, ascending

  // What it holds, in the 4-byte entries the limits count.
  uint64_t entries() const { return ids.size() + 2 * spans.size(); }
};

struct Job {
  uid_t uid = 0;
  std::string name;
  bool named = false;  // by #job (anchored on its publishers) or by session (its leader)
  bool permanent = false;
  std::vector<ProcessRef> anchors;  // the job lives while any of these runs
  // Its latest publisher's rights, which staging reads with: shared, so that asking for them
  // (per entry of an order, prefetch_copy) copies no group list under the planner's lock.
  std::shared_ptr<const Credentials> reader;
  std::vector<size_t> streams;  // schedule slots
  std::map<std::string, std::shared_ptr<const Manifest>> manifests;
  // The files its range orders and manifests read by blocks (prefetch/block_readers.h), by
  // "stream NAME" or "manifest NAME"; distinct, sorted.
  std::map<std::string, std::vector<FileId>> block_files;
  // Ids its uploads registered for paths no one had named (FileRegistry::order_id_of): when
  // the job ends they become candidates for release (Engine::reclaim_paths).
  std::vector<FileId> registered;
  int64_t last_active_ns = 0;
};

class Jobs {
 public:
  static constexpr size_t kMaxAnchors = 256;

  explicit Jobs(JobLimits limits) : limits_(limits) {}

  // The job an upload of publisher with this #job (if any) belongs to, made if new; an error
  // (EDQUOT, saying which limit) if the user already holds jobs_per_user jobs.
  cachestore::Result<Job*> job_for(const Publisher& publisher,
                                   const std::optional<std::string>& name, int64_t now);
  // EDQUOT if publisher may not start one more job.
  cachestore::Status check_new_job(const Publisher& publisher) const;
  // The job, if it exists, without making it.
  Job* find(const Publisher& publisher, const std::optional<std::string>& name);
  const Job* find(const Publisher& publisher, const std::optional<std::string>& name) const;

  // The schedule's name of stream within job: unique across users and jobs.
  static std::string stream_key(const Job& job, const std::string& stream);

  // EDQUOT if adding `streams` new streams and `entries` entries to job would pass a limit;
  // the message names the limit and by how much. `freed` entries of the job go at the same
  // time (an order or manifest replaced). user_now and all_now: the entries job's user and all
  // users hold now.
  cachestore::Status check(const Job& job, size_t new_streams, uint64_t entries, uint64_t freed,
                           uint64_t user_now, uint64_t all_now) const;

  // Every job, for sweeps and stats.
  std::map<std::pair<uid_t, std::string>, Job>& all() { return jobs_; }

  const std::map<std::pair<uid_t, std::string>, Job>& all() const { return jobs_; }

  void erase(const Job& job) { jobs_.erase({job.uid, job.name}); }

  const JobLimits& limits() const { return limits_; }

  static std::string session_job_name(pid_t sid) { return "session-" + std::to_string(sid); }

 private:
  // Streams the jobs of uid hold (the mount's own job not counted).
  size_t streams_of(uid_t uid) const;

  const JobLimits limits_;
  std::map<std::pair<uid_t, std::string>, Job> jobs_;
};

}  // namespace epochfs::prefetch
