#include "cachestore/trusted_path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <system_error>
#include <utility>

#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {
namespace {

constexpr mode_t kOthersWrite = S_IWGRP | S_IWOTH;

// Symlinks followed on one path before giving up: the kernel's MAXSYMLINKS (path_resolution(7)).
constexpr int kMaxSymlinks = 40;

enum class Role {
  kAbove,  // a directory on the way to the cache root
  kRoot,   // the cache root
};

std::string octal(mode_t mode) {
  char buf[8];
  snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string num(uid_t uid) { return std::to_string(static_cast<unsigned long>(uid)); }

Status refuse(std::string why) { return Status::error(EPERM, std::move(why)); }

Status check_root(const std::string& p, const struct stat& st, uid_t uid) {
  if (st.st_uid != uid) {
    return refuse("cache root " + p + " is owned by uid " + num(st.st_uid) +
                  ", not by this daemon's user (" + num(uid) + "): remove it or `chown " +
                  num(uid) + " " + p + " && chmod 0700 " + p + "`, or pass another --cache-dir");
  }
  if ((st.st_mode & kOthersWrite) != 0) {
    return refuse("cache root " + p + " has mode " + octal(st.st_mode) +
                  ", writable by other users: `chmod 0700 " + p +
                  "`, or pass a --cache-dir made for the cache inside it");
  }
  return Status::ok();
}

Status check_above(const std::string& p, const struct stat& st, uid_t uid,
                   const std::string& root) {
  if (st.st_uid != 0 && st.st_uid != uid) {
    return refuse(p + ", above the cache root " + root + ", is owned by uid " + num(st.st_uid) +
                  ", neither root nor this daemon's user (" + num(uid) +
                  "): that user could swap the cache root; pass a --cache-dir whose every "
                  "parent is root's or uid " +
                  num(uid) + "'s");
  }
  // Like /tmp: in a root-owned sticky directory no one renames or removes what is not theirs.
  const bool sticky_of_root = st.st_uid == 0 && (st.st_mode & S_ISVTX) != 0;
  if ((st.st_mode & kOthersWrite) != 0 && !sticky_of_root) {
    return refuse(p + ", above the cache root " + root + ", has mode " + octal(st.st_mode) +
                  ", writable by other users without being root's with the sticky bit: they "
                  "could swap the cache root; `chmod go-w " +
                  p + "`, or pass another --cache-dir");
  }
  return Status::ok();
}

Status check_dir(const std::string& p, const struct stat& st, uid_t uid, Role role,
                 const std::string& root) {
  if (!S_ISDIR(st.st_mode)) {
    return Status::error(ENOTDIR, p);
  }
  return role == Role::kRoot ? check_root(p, st, uid) : check_above(p, st, uid, root);
}

Status check_symlink(const std::string& p, const struct stat& st, uid_t uid,
                     const std::string& root) {
  if (st.st_uid != 0 && st.st_uid != uid) {
    return refuse(p + ", on the way to the cache root " + root + ", is a symlink owned by uid " +
                  num(st.st_uid) + ", neither root nor this daemon's user (" + num(uid) +
                  "): that user could point it elsewhere; pass another --cache-dir");
  }
  return Status::ok();
}

void push_front_components(const std::string& path, std::deque<std::string>& todo) {
  std::deque<std::string> parts;
  size_t at = 0;
  while (at <= path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    if (slash > at) {
      parts.push_back(path.substr(at, slash - at));
    }
    at = slash + 1;
  }
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

std::string parent_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// Resolves path one component at a time, as the kernel does, checking each directory passed
// and each symlink followed; the directory reached last gets the rule of `last`.
// root names the cache root in messages.
Status walk(const std::string& path, uid_t uid, Role last, const std::string& root) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).string();
  if (ec) {
    return Status::error(ec.value(), "absolute path of " + path);
  }
  std::deque<std::string> todo;
  push_front_components(abs, todo);
  std::string cur = "/";
  struct stat st;
  if (!todo.empty()) {  // "/" itself is checked below, by the rule of the last
    Status s = ::lstat("/", &st) == 0 ? check_dir("/", st, uid, Role::kAbove, root)
                                      : Status::error(errno, "lstat /");
    if (!s.is_ok()) {
      return s;
    }
  }
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") {
      continue;
    }
    if (name == "..") {
      cur = parent_of(cur);  // checked on the way down
      continue;
    }
    const std::string next = join(cur, name);
    if (::lstat(next.c_str(), &st) != 0) {
      return Status::error(errno, "lstat " + next);
    }
    if (S_ISLNK(st.st_mode)) {
      Status s = check_symlink(next, st, uid, root);
      if (!s.is_ok()) {
        return s;
      }
      char target[PATH_MAX];
      const ssize_t n = ::readlink(next.c_str(), target, sizeof(target) - 1);
      if (n < 0 || ++links > kMaxSymlinks) {
        return Status::error(n < 0 ? errno : ELOOP, "readlink " + next);
      }
      target[n] = '\0';
      cur = target[0] == '/' ? "/" : cur;
      push_front_components(target, todo);
      continue;
    }
    if (!todo.empty()) {  // the last one is checked below, by its own rule
      Status s = check_dir(next, st, uid, Role::kAbove, root);
      if (!s.is_ok()) {
        return s;
      }
    }
    cur = next;
  }
  if (::lstat(cur.c_str(), &st) != 0) {
    return Status::error(errno, "lstat " + cur);
  }
  return check_dir(cur, st, uid, last, root);
}

// An entry of a kept directory: uid's, writable by uid alone, and no symlink.
Status check_kept_entry(const std::string& p, const struct stat& st, uid_t uid) {
  if (S_ISLNK(st.st_mode)) {
    return refuse(p + " is a symlink");
  }
  if (st.st_uid != uid) {
    return refuse(p + " is owned by uid " + num(st.st_uid) + ", not by this daemon's user (" +
                  num(uid) + ")");
  }
  if ((st.st_mode & kOthersWrite) != 0) {
    return refuse(p + " has mode " + octal(st.st_mode) + ", writable by other users");
  }
  return Status::ok();
}

// Checks the entries of the directory dir_fd (at path). Regular files are skipped if
// skip_files (the copies of a fan-out directory, checked as they are adopted); directories are
// descended into while depth > 0.
Status check_kept_entries(int dir_fd, const std::string& path, uid_t uid, int depth,
                          bool skip_files) {
  UniqueFd dup(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  DIR* d = dup.valid() ? ::fdopendir(dup.get()) : nullptr;
  if (d == nullptr) {
    return Status::error(errno, "opendir " + path);
  }
  dup.release();  // closedir closes it
  ::rewinddir(d);
  Status result;
  // readdir is safe on a stream no other thread uses (glibc); the check cannot tell.
  while (struct dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe)
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        (skip_files && e->d_type == DT_REG)) {
      continue;
    }
    const std::string p = path + "/" + e->d_name;
    struct stat st;
    if (::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      result = Status::error(errno, "stat " + p);
      break;
    }
    result = check_kept_entry(p, st, uid);
    if (result.is_ok() && S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      result = !sub.valid() ? Status::error(errno, "open " + p)
               : depth > 0  ? check_kept_entries(sub.get(), p, uid, depth - 1, true)
                            : refuse(p + " is a directory deeper than a fan-out one");
    }
    if (!result.is_ok()) {
      break;
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace

Status check_cache_root(const std::string& path, uid_t uid) {
  return walk(path, uid, Role::kRoot, path);
}

Status check_cache_root_parent(const std::string& path, const std::string& root, uid_t uid) {
  return walk(path, uid, Role::kAbove, root);
}

Status check_kept_dir(int dir_fd, const std::string& path, uid_t uid) {
  struct stat st;
  if (::fstat(dir_fd, &st) != 0) {
    return Status::error(errno, "stat " + path);
  }
  Status s = check_kept_entry(path, st, uid);
  // Depth 1: the lock, the index and the fan-out directories, then what the latter hold.
  return s.is_ok() ? check_kept_entries(dir_fd, path, uid, 1, false) : s;
}

bool trusted_copy(const struct stat& st, uid_t uid) {
  return S_ISREG(st.st_mode) && st.st_uid == uid && (st.st_mode & kOthersWrite) == 0;
}

}  // namespace epochfs::cachestore
