// `epochfs doctor`: checks what a mount needs from the node, the source and the cache disk, and
// prints one line per check with what to do about each problem.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cachestore/fs_type.h"
#include "cachestore/trusted_path.h"
#include "cachestore/unique_fd.h"
#include "tools/cli/cache_room.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

// Files timed on the source: enough for a median, few enough to take a second on slow storage.
constexpr size_t kTimedFiles = 8;

constexpr const char* kDefaultCacheDir = "/var/cache/epochfs";

// Prints one line per check; counts the problems.
class Report {
 public:
  __attribute__((format(printf, 2, 3))) void ok(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    print("ok", fmt, args);
    va_end(args);
  }

  __attribute__((format(printf, 2, 3))) void warn(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    print("warning", fmt, args);
    va_end(args);
  }

  __attribute__((format(printf, 2, 3))) void problem(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    print("PROBLEM", fmt, args);
    va_end(args);
    ++problems_;
  }

  int problems() const { return problems_; }

 private:
  static void print(const char* verdict, const char* fmt, va_list args) {
    char text[1024];
    vsnprintf(text, sizeof(text), fmt, args);
    printf("%-8s %s\n", verdict, text);
  }

  int problems_ = 0;
};

void check_fuse_device(const std::string& device, Report& r) {
  struct stat st;
  if (::stat(device.c_str(), &st) != 0) {
    r.problem(
        "%s is missing: load the fuse module (modprobe fuse), or in a container pass "
        "the device in (docker run --device /dev/fuse)",
        device.c_str());
    return;
  }
  if (!S_ISCHR(st.st_mode)) {
    r.problem("%s is not a character device: recreate it (mknod %s c 10 229)", device.c_str(),
              device.c_str());
    return;
  }
  cachestore::UniqueFd fd(::open(device.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    r.problem("cannot open %s: %s%s", device.c_str(), strerror(errno),
              errno == EACCES ? " (this user may not use FUSE: run as root, or fix the "
                                "device's mode)"
                              : "");
    return;
  }
  r.ok("%s opens", device.c_str());
}

void check_privileges(Report& r) {
  if (geteuid() == 0) {
    r.ok("running as root: kernel passthrough (--data-path passthrough) is allowed");
    return;
  }
  if (access("/usr/bin/fusermount3", X_OK) != 0 && access("/bin/fusermount3", X_OK) != 0) {
    r.problem("fusermount3 is missing: a non-root user mounts through it (apt install fuse3)");
  } else {
    r.ok("fusermount3 is installed (mounts as this user go through it)");
  }
  std::ifstream conf("/etc/fuse.conf");
  std::string line;
  bool allow_other = false;
  while (std::getline(conf, line)) {
    allow_other = allow_other || line.rfind("user_allow_other", 0) == 0;
  }
  if (!allow_other) {
    r.warn("--allow-other needs user_allow_other in /etc/fuse.conf for a non-root user");
  }
  r.warn("not root: --data-path passthrough falls back to classic (needs CAP_SYS_ADMIN)");
}

void check_kernel(Report& r) {
  utsname u;
  if (uname(&u) != 0) {
    return;
  }
  int major = 0;
  int minor = 0;
  sscanf(u.release, "%d.%d", &major, &minor);
  if (major > 6 || (major == 6 && minor >= 9)) {
    r.ok("kernel %s supports FUSE passthrough", u.release);
  } else {
    r.warn("kernel %s: no FUSE passthrough before 6.9 (reads stay classic)", u.release);
  }
}

void check_open_files(Report& r) {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return;
  }
  // The daemon raises its soft limit to the hard one; copies in flight and open files each
  // hold a descriptor.
  if (lim.rlim_max < 4096) {
    r.warn(
        "open-files limit %llu: readers and copies share it; raise it (ulimit -Hn, "
        "LimitNOFILE= in a unit)",
        static_cast<unsigned long long>(lim.rlim_max));
  } else {
    r.ok("open-files limit %llu", static_cast<unsigned long long>(lim.rlim_max));
  }
}

// The mount's own check (cachestore/trusted_path.h), on the cache dir or, if it is not made
// yet, on the nearest directory above it.
void check_cache_dir_owner(const DoctorOptions& o, const std::string& wanted,
                           const std::string& dir, Report& r) {
  const cachestore::Status s = dir == wanted
                                   ? cachestore::check_cache_root(dir, geteuid())
                                   : cachestore::check_cache_root_parent(dir, wanted, geteuid());
  if (!s.is_ok()) {
    r.problem("cache dir %s: %s", o.cache_dir.c_str(),
              (s.error_code() == EPERM ? s.context() : s.to_string()).c_str());
  }
}

void check_cache_dir(const DoctorOptions& o, Report& r) {
  const std::string wanted = absolute_path(o.cache_dir);
  const auto room = cache_room(wanted, o.cache_reserve_percent / 100);
  if (!room) {
    r.problem("cache dir %s: %s", o.cache_dir.c_str(), strerror(errno));
    return;
  }
  const std::string& dir = room->dir;
  check_cache_dir_owner(o, wanted, dir, r);
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    r.problem(
        "cache dir %s: %s is not writable by this user: pass --cache-dir with a "
        "directory you can write, or --no-cache",
        o.cache_dir.c_str(), dir.c_str());
  }
  if (room->fs_type == TMPFS_MAGIC) {
    r.warn("cache dir %s is on tmpfs: copies take RAM from the trainer; use a local disk",
           o.cache_dir.c_str());
  } else if (const char* net = cachestore::network_fs_name(room->fs_type)) {
    r.warn("cache dir %s is on %s, not a local disk: copies gain little", o.cache_dir.c_str(), net);
  }
  const double usable = room->usable();
  if (usable <= 0) {
    r.problem(
        "cache dir %s is full: %s free of %s, at or below the %.0f%% reserve; nothing "
        "can be cached: free space there, or pass another --cache-dir",
        o.cache_dir.c_str(), human_bytes(room->free).c_str(), human_bytes(room->total).c_str(),
        o.cache_reserve_percent);
  } else if (o.cache_size_bytes > 0 && usable < static_cast<double>(o.cache_size_bytes)) {
    r.warn("cache dir %s: %s usable, less than --cache-size %s: the reserve will limit it",
           o.cache_dir.c_str(), human_bytes(usable).c_str(),
           human_bytes(static_cast<double>(o.cache_size_bytes)).c_str());
  } else {
    r.ok("cache dir %s: %s usable of %s", o.cache_dir.c_str(), human_bytes(usable).c_str(),
         human_bytes(room->total).c_str());
  }
}

// Up to n regular files under dir, breadth first.
std::vector<std::string> sample_files(const std::string& root, size_t n) {
  std::vector<std::string> files;
  std::vector<std::string> dirs = {root};
  for (size_t i = 0; i < dirs.size() && files.size() < n && i < 64; ++i) {
    DIR* d = opendir(dirs[i].c_str());
    if (d == nullptr) {
      continue;
    }
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") {
        continue;
      }
      if (e->d_type == DT_DIR) {
        dirs.push_back(dirs[i] + "/" + name);
      } else if (e->d_type == DT_REG && files.size() < n) {
        files.push_back(dirs[i] + "/" + name);
      }
    }
    closedir(d);
  }
  return files;
}

// Milliseconds to open and read the first 64 KiB of path; negative (-errno) on failure.
double timed_read_ms(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return -errno;
  }
  char buf[65536];
  if (::read(fd.get(), buf, sizeof(buf)) < 0) {
    return -errno;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

void check_source(const std::string& source, Report& r) {
  struct statfs fs;
  if (::statfs(source.c_str(), &fs) != 0) {
    r.problem("source %s: %s", source.c_str(), strerror(errno));
    return;
  }
  const char* net = cachestore::network_fs_name(static_cast<long>(fs.f_type));
  r.ok("source %s is on %s", source.c_str(), net != nullptr ? net : "a local filesystem");
  const auto files = sample_files(source, kTimedFiles);
  if (files.empty()) {
    r.warn("source %s: no readable files found to time", source.c_str());
    return;
  }
  std::vector<double> ms;
  for (const auto& f : files) {
    const double t = timed_read_ms(f);
    if (t < 0) {
      const int err = static_cast<int>(-t);
      r.problem("source file %s: %s%s", f.c_str(), strerror(err),
                err == EACCES && geteuid() == 0
                    ? " (root is refused: the export likely has root_squash; mount as a user "
                      "who can read the data, or export with no_root_squash)"
                    : "");
      return;
    }
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  // The page cache may hold these files: the figure is a lower bound on a miss's cost.
  r.ok(
      "source: open + first 64 KiB read: median %.2f ms, max %.2f ms over %zu files "
      "(each miss costs at least this)",
      ms[ms.size() / 2], ms.back(), ms.size());
}

// Returns the mount's cache directory ("" if it has none or is unreadable).
std::string check_mount(const std::string& mountpoint, Report& r) {
  if (is_dead_mount(mountpoint)) {
    r.problem(
        "%s is a stale mount: its daemon died; `epochfs mount` at the same path detaches "
        "it, or run: epochfs unmount --lazy %s",
        mountpoint.c_str(), mountpoint.c_str());
    return "";
  }
  const auto stats = read_stats(mountpoint);
  if (!stats) {
    r.problem("%s answers but its .epochfs/stats is unreadable", mountpoint.c_str());
    return "";
  }
  r.ok("%s is served by pid %.0f", mountpoint.c_str(), stats->number("pid").value_or(0));
  const auto it = stats->values.find("data_path.classic_because");
  if (it != stats->values.end() && !it->second.empty() && it->second != "null" &&
      it->second.rfind("not requested", 0) != 0) {
    r.warn("data path classic: %s", it->second.c_str());
  }
  if (stats->number("cache.errors_io").value_or(0) > 0) {
    r.problem(
        "the cache disk gave %.0f I/O errors: check it (dmesg); reads fall back to "
        "the source meanwhile",
        *stats->number("cache.errors_io"));
  }
  if (stats->number("cache.errors_no_space").value_or(0) > 0) {
    r.warn("the cache disk ran out of space %.0f times: lower --cache-size or free space",
           *stats->number("cache.errors_no_space"));
  }
  if (auto source = stats->values.find("source"); source != stats->values.end()) {
    check_source(source->second, r);
  }
  const auto dir = stats->values.find("cache.dir");
  return dir != stats->values.end() && dir->second != "null" ? dir->second : "";
}

}  // namespace

// An fstab line mounting epochfs at path, if any (its mountpoint field, then its type).
bool in_fstab_as_epochfs(const std::string& path) {
  std::ifstream fstab("/etc/fstab");
  for (std::string line; std::getline(fstab, line);) {
    std::istringstream fields(line);
    std::string spec, file, type;
    if (fields >> spec >> file >> type && spec[0] != '#' && file == path &&
        type.find("epochfs") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// A path with nothing in it is no source, and no mount either: an unmounted mountpoint, most
// likely. True if path was such a one (and reported).
bool check_not_mounted(const std::string& path, Report& r) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec) || !std::filesystem::is_empty(path, ec)) {
    return false;
  }
  if (in_fstab_as_epochfs(path)) {
    r.problem(
        "%s is an epochfs mountpoint in /etc/fstab, but nothing is mounted there; run: "
        "mount %s",
        path.c_str(), path.c_str());
  } else {
    r.problem(
        "%s is an empty directory: nothing is mounted there, and it holds no dataset; "
        "give doctor a mount (after `epochfs mount SOURCE %s`) or a dataset's directory",
        path.c_str(), path.c_str());
  }
  return true;
}

int cmd_doctor(const DoctorOptions& options) {
  DoctorOptions o = options;
  Report r;
  check_fuse_device(o.fuse_device, r);
  check_privileges(r);
  check_kernel(r);
  check_open_files(r);
  std::string mount_cache_dir;
  if (!o.path.empty()) {
    const std::string path = absolute_path(o.path);
    if (mount_type_at(path) == std::optional<std::string>("fuse.epochfs")) {
      mount_cache_dir = check_mount(path, r);
    } else if (!check_not_mounted(path, r)) {
      check_source(path, r);
    }
  }
  if (o.cache_dir.empty()) {
    o.cache_dir = mount_cache_dir.empty() ? kDefaultCacheDir : mount_cache_dir;
  }
  if (!o.no_cache) {
    check_cache_dir(o, r);
  }
  printf("%s\n", r.problems() == 0 ? "no problems found"
                                   : (std::to_string(r.problems()) + " problem(s) found").c_str());
  return r.problems() > 0 ? 1 : 0;
}

}  // namespace epochfs::tools
