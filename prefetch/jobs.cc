#include "prefetch/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "cachestore/proc_stat.h"
#include "cachestore/unique_fd.h"

namespace epochfs::prefetch {

using cachestore::Result;
using cachestore::Status;

namespace {

// The text of a small /proc file; empty if it cannot be read (the process is gone).
std::string read_proc(const std::string& path) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return {};
  }
  char buf[1024];
  const ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Field `field` of pid's /proc/<pid>/stat.
std::optional<uint64_t> stat_field(pid_t pid, int field) {
  const auto st = cachestore::ProcStat::of(pid);
  return st ? st->number(field) : std::nullopt;
}

std::optional<ProcessRef> ref_of(pid_t pid) {
  if (pid <= 0) {
    return std::nullopt;
  }
  auto start = stat_field(pid, cachestore::ProcStat::kStartTime);
  if (!start) {
    return std::nullopt;
  }
  return ProcessRef{pid, *start};
}

// The thread group (process) of thread tid: FUSE requests carry the calling thread's id.
pid_t tgid_of(pid_t tid) {
  const std::string text = read_proc("/proc/" + std::to_string(tid) + "/status");
  const size_t at = text.find("\nTgid:");
  if (at == std::string::npos) {
    return 0;
  }
  std::string_view rest(text);
  rest.remove_prefix(at + 6);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) {
    rest.remove_prefix(1);
  }
  auto v = cachestore::parse_u64(rest.substr(0, rest.find('\n')));
  return v ? static_cast<pid_t>(*v) : 0;
}

}  // namespace

std::optional<ProcessRef> process_of(pid_t tid) {
  return tid > 0 ? ref_of(tgid_of(tid)) : std::nullopt;
}

bool alive(const ProcessRef& p) {
  const auto st = cachestore::ProcStat::of(p.pid);
  return st && !st->exited() && st->number(cachestore::ProcStat::kStartTime) == p.start_ticks;
}

Publisher Publisher::of(uid_t uid, gid_t gid, pid_t tid) {
  Publisher p;
  p.uid = uid;
  p.creds = Credentials::of(uid, gid, tid);
  p.process = process_of(tid);
  const auto st = tid > 0 ? cachestore::ProcStat::of(tid) : std::nullopt;
  if (auto sid = st ? st->number(cachestore::ProcStat::kSession) : std::nullopt) {
    p.sid = static_cast<pid_t>(*sid);
    p.leader = ref_of(p.sid);
  }
  return p;
}

Publisher Publisher::mount() {
  Publisher p;
  p.uid = ::getuid();
  p.creds.uid = ::geteuid();
  p.creds.gid = ::getegid();
  p.is_mount = true;
  return p;
}

namespace {

std::string job_name(const Publisher& publisher, const std::optional<std::string>& name) {
  if (name) {
    return *name;
  }
  if (publisher.is_mount) {
    return "mount";
  }
  // A writer whose session is unknown (pid 0: another pid namespace) gets one job per user.
  return Jobs::session_job_name(publisher.sid);
}

}  // namespace

const Job* Jobs::find(const Publisher& publisher, const std::optional<std::string>& name) const {
  auto it = jobs_.find({publisher.uid, job_name(publisher, name)});
  return it == jobs_.end() ? nullptr : &it->second;
}

Job* Jobs::find(const Publisher& publisher, const std::optional<std::string>& name) {
  auto it = jobs_.find({publisher.uid, job_name(publisher, name)});
  return it == jobs_.end() ? nullptr : &it->second;
}

Result<Job*> Jobs::job_for(const Publisher& publisher, const std::optional<std::string>& name,
                           int64_t now) {
  Job* job = find(publisher, name);
  if (job == nullptr) {
    Status room = check_new_job(publisher);
    if (!room.is_ok()) {
      return room;
    }
    Job fresh;
    fresh.uid = publisher.uid;
    fresh.name = job_name(publisher, name);
    fresh.named = name.has_value();
    fresh.permanent = publisher.is_mount;
    job = &jobs_.emplace(std::make_pair(fresh.uid, fresh.name), std::move(fresh)).first->second;
  }
  // A named job lives while any of its publishers does; a session job while its leader does
  // (or, when the leader is unknown, the writer).
  std::optional<ProcessRef> anchor =
      job->named ? publisher.process : (publisher.leader ? publisher.leader : publisher.process);
  if (anchor && job->anchors.size() < kMaxAnchors &&
      std::find(job->anchors.begin(), job->anchors.end(), *anchor) == job->anchors.end()) {
    job->anchors.push_back(*anchor);
  }
  job->last_active_ns = now;
  job->reader = std::make_shared<const Credentials>(publisher.creds);
  return job;
}

Status Jobs::check_new_job(const Publisher& publisher) const {
  size_t held = 0;
  for (const auto& [key, j] : jobs_) {
    held += key.first == publisher.uid && !j.permanent ? 1 : 0;
  }
  if (!publisher.is_mount && held >= limits_.jobs_per_user) {
    return Status::error(EDQUOT, "user " + std::to_string(publisher.uid) + " has " +
                                     std::to_string(held) +
                                     " jobs, the per-user limit (--max-jobs-per-user " +
                                     std::to_string(limits_.jobs_per_user) + ")");
  }
  return Status::ok();
}

std::string Jobs::stream_key(const Job& job, const std::string& stream) {
  return std::to_string(job.uid) + "/" + job.name + "/" + stream;
}

size_t Jobs::streams_of(uid_t uid) const {
  size_t n = 0;
  for (auto it = jobs_.lower_bound({uid, std::string()});
       it != jobs_.end() && it->first.first == uid; ++it) {
    n += it->second.permanent ? 0 : it->second.streams.size();
  }
  return n;
}

Status Jobs::check(const Job& job, size_t new_streams, uint64_t entries, uint64_t freed,
                   uint64_t user_now, uint64_t all_now) const {
  if (job.permanent) {
    return Status::ok();
  }
  if (job.streams.size() + new_streams > limits_.streams_per_job) {
    return Status::error(EDQUOT, "job " + job.name + " has " + std::to_string(job.streams.size()) +
                                     " streams, the per-job limit (--max-streams-per-job " +
                                     std::to_string(limits_.streams_per_job) + ")");
  }
  const size_t user_streams = streams_of(job.uid);
  if (user_streams + new_streams > limits_.streams_per_user) {
    return Status::error(EDQUOT, "user " + std::to_string(job.uid) + " has " +
                                     std::to_string(user_streams) +
                                     " streams, the per-user limit (--max-streams-per-user " +
                                     std::to_string(limits_.streams_per_user) + ")");
  }
  const uint64_t after = user_now - std::min(freed, user_now) + entries;
  if (after > limits_.entries_per_user) {
    return Status::error(EDQUOT, "user " + std::to_string(job.uid) + " would hold " +
                                     std::to_string(after) + " order and manifest entries, " +
                                     std::to_string(after - limits_.entries_per_user) +
                                     " over the per-user limit (--max-entries-per-user " +
                                     std::to_string(limits_.entries_per_user) + ")");
  }
  const uint64_t all_after = all_now - std::min(freed, all_now) + entries;
  if (all_after > limits_.entries) {
    return Status::error(EDQUOT, "all users would hold " + std::to_string(all_after) +
                                     " order and manifest entries, over the mount's limit "
                                     "(--max-entries " +
                                     std::to_string(limits_.entries) + ")");
  }
  return Status::ok();
}

}  // namespace epochfs::prefetch
