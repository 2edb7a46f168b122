#include "prefetch/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sstream>

#include <xxhash.h>

#include "cachestore/unique_fd.h"

namespace epochfs::prefetch {

namespace {

// /proc/<tid>/status, whole (the Groups line can be long).
std::string read_status(pid_t tid) {
  cachestore::UniqueFd fd(
      ::open(("/proc/" + std::to_string(tid) + "/status").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return {};
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;) {
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

// The numbers after "<key>:\t" on its line of a status text.
std::vector<unsigned long> status_numbers(const std::string& text, const std::string& key) {
  std::vector<unsigned long> out;
  const size_t at = text.find("\n" + key + ":");
  if (at == std::string::npos) {
    return out;
  }
  const size_t begin = at + key.size() + 2;
  std::istringstream line(text.substr(begin, text.find('\n', begin) - begin));
  for (unsigned long v; line >> v;) {
    out.push_back(v);
  }
  return out;
}

// The calling thread's credentials, set and restored by raw system calls (per thread).
class ThreadIdentity {
 public:
  explicit ThreadIdentity(const Credentials& c) {
    const int n = ::getgroups(0, nullptr);
    saved_groups_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (n > 0 && ::getgroups(n, saved_groups_.data()) != n) {
      saved_groups_.clear();
    }
    // Groups and group first: once the fs uid is not 0, changing them is no longer allowed.
    ok_ = ::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) == 0;
    ::syscall(SYS_setfsgid, c.gid);
    ::syscall(SYS_setfsuid, c.uid);
    ok_ = ok_ && static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) == c.uid &&
          static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) == c.gid;
  }

  ~ThreadIdentity() {
    ::syscall(SYS_setfsuid, ::geteuid());
    ::syscall(SYS_setfsgid, ::getegid());
    ::syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
  }

  ThreadIdentity(const ThreadIdentity&) = delete;
  ThreadIdentity& operator=(const ThreadIdentity&) = delete;

  bool ok() const { return ok_; }

 private:
  std::vector<gid_t> saved_groups_;
  bool ok_ = false;
};

// Whether the daemon may check for others at all (it runs as root), and whether creds need a
// check (not root, not the daemon's own user).
bool can_check_others() { return ::geteuid() == 0; }

bool needs_check(const Credentials& creds) { return creds.uid != 0 && creds.uid != ::geteuid(); }

}  // namespace

uint32_t Credentials::fingerprint() const {
  // Asked per cached entry of every epoch: two one-shot hashes, no state to allocate.
  const uint32_t ids[2] = {static_cast<uint32_t>(uid), static_cast<uint32_t>(gid)};
  const uint32_t hash =
      XXH32(groups.data(), groups.size() * sizeof(gid_t), XXH32(ids, sizeof(ids), 0));
  return hash == 0 ? 1 : hash;
}

Credentials Credentials::of(uid_t uid, gid_t gid, pid_t tid) {
  Credentials c;
  c.uid = uid;
  c.gid = gid;
  if (tid <= 0) {
    return c;
  }
  const std::string status = read_status(tid);
  const auto uids = status_numbers(status, "Uid");
  const auto gids = status_numbers(status, "Gid");
  // Fields: real, effective, saved, filesystem. The kernel checks with the last.
  if (uids.size() == 4 && gids.size() == 4 && uids[3] == uid && gids[3] == gid) {
    for (unsigned long g : status_numbers(status, "Groups")) {
      c.groups.push_back(static_cast<gid_t>(g));
    }
  }
  return c;
}

cachestore::Status may_read_as(const cachestore::RootDir& root, const std::string& rel,
                               const Credentials& creds) {
  if (!needs_check(creds)) {
    return cachestore::Status::ok();
  }
  const std::string who = " (as user " + std::to_string(creds.uid) + ")";
  if (!can_check_others()) {
    // Another user's order on a user's mount: their rights cannot be checked.
    return cachestore::Status::error(EPERM, "staging for another user needs a root daemon" + who);
  }
  ThreadIdentity as(creds);
  if (!as.ok()) {
    return cachestore::Status::error(EPERM, "taking the publisher's rights" + who);
  }
  cachestore::Status readable = root.access_at(rel, R_OK, true);
  if (readable.is_ok()) {
    return readable;
  }
  return cachestore::Status::error(readable.error_code(), readable.context() + who);
}

}  // namespace epochfs::prefetch
