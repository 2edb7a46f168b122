// epochfs-faultfs: a FUSE passthrough that injects faults, for reliability tests. It stands in
// for a sick NFS server (as the source of an epochfs mount) and for a sick local disk (as the
// filesystem under --cache-dir), so it passes writes through too.
//
// Faults are rules, set and replaced at run time with
//   setfattr -n user.faultfs.rules -v "$(cat rules)" MOUNTPOINT
// one rule per line:
//   OP GLOB ACTION [p=PROBABILITY] [count=N] [uid=UID]
// OP is lookup, getattr, open, read, readdir, readlink, create, write, mkdir, unlink, rename,
// fsync, statfs or any; GLOB an fnmatch pattern on the path from the mount's root ("/a/*.jpg";
// '*' also matches '/'); ACTION one of
//   errno=EIO            fail with that errno (EIO ENOENT ESTALE EACCES ENOTCONN ETIMEDOUT
//                        EINTR EAGAIN ENOSPC EROFS)
//   delay=MS             answer after MS milliseconds
//   hang                 answer only after `setfattr -n user.faultfs.release MOUNTPOINT`
//                        (or an interrupt from the kernel: a killed reader is not held)
//   short=N              a read returns at most N bytes
//   mutate=append|truncate|rewrite
//                        before the read is served, change the file underneath: append 4 KiB,
//                        cut it to half, or rewrite it with other bytes of the same size
// The root directory's attributes are never faulted, so that the rules can always be changed.
// The first rule that matches an operation (and passes its probability, with count left)
// applies. Each rule's count (default unlimited; mutate 1) is used up as it fires.
//
// Counters: getfattr -n user.faultfs.stats MOUNTPOINT gives JSON with, per path, the opens,
// reads and bytes read, and the faults injected in all: tests prove single-flight with them.
//
// A test fixture, not part of the product: it uses libfuse directly (tools/dev/check.sh).
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fuse3/fuse.h>

namespace {

constexpr char kRulesXattr[] = "user.faultfs.rules";
constexpr char kReleaseXattr[] = "user.faultfs.release";
constexpr char kStatsXattr[] = "user.faultfs.stats";

enum class Action { kErrno, kDelay, kHang, kShort, kMutate };

struct Rule {
  std::string op;
  std::string glob;
  Action action = Action::kErrno;
  int err = 0;
  unsigned delay_ms = 0;
  size_t short_bytes = 0;
  std::string mutation;
  double probability = 1;
  long count = -1;  // -1: unlimited
  long uid = -1;    // -1: any caller
};

const std::map<std::string, int>& errno_names() {
  static const std::map<std::string, int> kNames = {
      {"EIO", EIO},           {"ENOENT", ENOENT},       {"ESTALE", ESTALE}, {"EACCES", EACCES},
      {"ENOTCONN", ENOTCONN}, {"ETIMEDOUT", ETIMEDOUT}, {"EINTR", EINTR},   {"EAGAIN", EAGAIN},
      {"ENOSPC", ENOSPC},     {"EROFS", EROFS}};
  return kNames;
}

bool parse_action(const std::string& word, Rule& r) {
  const size_t eq = word.find('=');
  const std::string key = word.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
  if (key == "errno") {
    const auto it = errno_names().find(value);
    r.action = Action::kErrno;
    r.err = it == errno_names().end() ? 0 : it->second;
    return r.err != 0;
  }
  if (key == "delay") {
    r.action = Action::kDelay;
    r.delay_ms = static_cast<unsigned>(std::stoul(value));
    return true;
  }
  if (key == "hang") {
    r.action = Action::kHang;
    return true;
  }
  if (key == "short") {
    r.action = Action::kShort;
    r.short_bytes = std::stoul(value);
    return true;
  }
  if (key == "mutate") {
    r.action = Action::kMutate;
    r.mutation = value;
    r.count = 1;
    return value == "append" || value == "truncate" || value == "rewrite";
  }
  return false;
}

// Parses the rules text; nullopt (with the bad line in *error) if a line is malformed.
std::optional<std::vector<Rule>> parse_rules(const std::string& text, std::string* error) {
  std::vector<Rule> rules;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    Rule r;
    std::string action;
    if (!(words >> r.op)) {
      continue;  // blank line
    }
    bool ok = static_cast<bool>(words >> r.glob >> action);
    try {
      ok = ok && parse_action(action, r);
      for (std::string opt; ok && words >> opt;) {
        if (opt.rfind("p=", 0) == 0) {
          r.probability = std::stod(opt.substr(2));
        } else if (opt.rfind("count=", 0) == 0) {
          r.count = std::stol(opt.substr(6));
        } else if (opt.rfind("uid=", 0) == 0) {
          r.uid = std::stol(opt.substr(4));
        } else {
          ok = false;
        }
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) {
      *error = line;
      return std::nullopt;
    }
    rules.push_back(r);
  }
  return rules;
}

struct PathCounters {
  uint64_t opens = 0;
  uint64_t reads = 0;
  uint64_t bytes = 0;
};

class State {
 public:
  explicit State(int root_fd) : root_fd_(root_fd) {}

  int root() const { return root_fd_; }

  bool set_rules(const std::string& text) {
    std::string bad;
    auto rules = parse_rules(text, &bad);
    if (!rules) {
      fprintf(stderr, "epochfs-faultfs: bad rule: %s\n", bad.c_str());
      return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    rules_ = std::move(*rules);
    return true;
  }

  // The rule that applies to op on path now, used up by one; nullopt if none.
  std::optional<Rule> fire(const char* op, const char* path) {
    const fuse_context* ctx = fuse_get_context();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : rules_) {
      if ((r.op != op && r.op != "any") || fnmatch(r.glob.c_str(), path, 0) != 0 || r.count == 0 ||
          (r.uid >= 0 && ctx != nullptr && ctx->uid != r.uid)) {
        continue;
      }
      if (r.probability < 1 && std::uniform_real_distribution<>(0, 1)(rng_) >= r.probability) {
        continue;
      }
      if (r.count > 0) {
        --r.count;
      }
      ++injected_;
      return r;
    }
    return std::nullopt;
  }

  // Blocks until release() or an interrupt from the kernel.
  int hang() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = release_generation_;
    while (release_generation_ == generation) {
      if (fuse_interrupted() != 0) {
        return -EINTR;
      }
      released_.wait_for(lock, std::chrono::milliseconds(50));
    }
    return 0;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    ++release_generation_;
    released_.notify_all();
  }

  void count_open(const char* path) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_[path].opens;
  }

  void count_read(const char* path, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& c = counters_[path];
    ++c.reads;
    c.bytes += bytes;
  }

  std::string stats_json() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out = "{\"injected\": " + std::to_string(injected_) + ", \"paths\": {";
    bool first = true;
    for (const auto& [path, c] : counters_) {
      out += (first ? "" : ", ") + std::string("\"") + path +
             "\": {\"opens\": " + std::to_string(c.opens) +
             ", \"reads\": " + std::to_string(c.reads) + ", \"bytes\": " + std::to_string(c.bytes) +
             "}";
      first = false;
    }
    return out + "}}";
  }

 private:
  const int root_fd_;
  std::mutex mu_;
  std::condition_variable released_;
  std::vector<Rule> rules_;
  std::map<std::string, PathCounters> counters_;
  uint64_t injected_ = 0;
  uint64_t release_generation_ = 0;
  std::mt19937_64 rng_{42};
};

State& state() { return *static_cast<State*>(fuse_get_context()->private_data); }

// The path relative to the root fd ("." for the root).
std::string rel(const char* path) { return path[1] == '\0' ? "." : std::string(path + 1); }

int err() { return -errno; }

void mutate(int fd, const std::string& how) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return;
  }
  if (how == "append") {
    const std::string more(4096, 'M');
    [[maybe_unused]] ssize_t n = pwrite(fd, more.data(), more.size(), st.st_size);
  } else if (how == "truncate") {
    [[maybe_unused]] int rc = ftruncate(fd, st.st_size / 2);
  } else {
    std::vector<char> other(static_cast<size_t>(st.st_size), 'R');
    [[maybe_unused]] ssize_t n = pwrite(fd, other.data(), other.size(), 0);
  }
  // A new mtime even within the same clock tick.
  timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  futimens(fd, times);
}

// Applies the rule for op on path, if any. Returns 0 to go on, or -errno to fail with. A short
// read's limit goes to *limit, a mutation is done on fd.
int inject(const char* op, const char* path, size_t* limit = nullptr, int fd = -1) {
  auto rule = state().fire(op, path);
  if (!rule) {
    return 0;
  }
  switch (rule->action) {
    case Action::kErrno:
      return -rule->err;
    case Action::kDelay:
      std::this_thread::sleep_for(std::chrono::milliseconds(rule->delay_ms));
      return 0;
    case Action::kHang:
      return state().hang();
    case Action::kShort:
      if (limit != nullptr) {
        *limit = std::min(*limit, rule->short_bytes);
      }
      return 0;
    case Action::kMutate:
      if (fd >= 0) {
        // Reads go through a read-only fd: mutate through a writable one.
        const int wfd = openat(state().root(), rel(path).c_str(), O_WRONLY | O_CLOEXEC);
        if (wfd >= 0) {
          mutate(wfd, rule->mutation);
          close(wfd);
        }
      }
      return 0;
  }
  return 0;
}

int op_getattr(const char* path, struct stat* st, fuse_file_info* fi) {
  // The root always answers, so that the rules can always be changed.
  const bool root = strcmp(path, "/") == 0;
  if (int rc = root ? 0 : inject(fi != nullptr ? "getattr" : "lookup", path); rc != 0) {
    return rc;
  }
  const int r = fi != nullptr ? fstat(static_cast<int>(fi->fh), st)
                              : fstatat(state().root(), rel(path).c_str(), st, AT_SYMLINK_NOFOLLOW);
  return r == 0 ? 0 : err();
}

int op_readlink(const char* path, char* buf, size_t size) {
  if (int rc = inject("readlink", path); rc != 0) {
    return rc;
  }
  const ssize_t n = readlinkat(state().root(), rel(path).c_str(), buf, size - 1);
  if (n < 0) {
    return err();
  }
  buf[n] = '\0';
  return 0;
}

int op_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t /*offset*/,
               fuse_file_info* /*fi*/, fuse_readdir_flags /*flags*/) {
  if (int rc = inject("readdir", path); rc != 0) {
    return rc;
  }
  const int fd = openat(state().root(), rel(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return err();
  }
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return err();
  }
  while (dirent* e = readdir(d)) {
    struct stat st = {};
    st.st_ino = e->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(e->d_type));
    fill(buf, e->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0));
  }
  closedir(d);
  return 0;
}

int op_open(const char* path, fuse_file_info* fi) {
  if (int rc = inject("open", path); rc != 0) {
    return rc;
  }
  const int fd = openat(state().root(), rel(path).c_str(), fi->flags | O_CLOEXEC);
  if (fd < 0) {
    return err();
  }
  fi->fh = static_cast<uint64_t>(fd);
  // Every read reaches the rules, and a short read reaches the caller as one (through the page
  // cache the kernel would take it for the end of the file).
  fi->direct_io = 1;
  state().count_open(path);
  return 0;
}

int op_create(const char* path, mode_t mode, fuse_file_info* fi) {
  if (int rc = inject("create", path); rc != 0) {
    return rc;
  }
  const int fd = openat(state().root(), rel(path).c_str(), fi->flags | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) {
    return err();
  }
  fi->fh = static_cast<uint64_t>(fd);
  fi->direct_io = 1;
  return 0;
}

int op_read(const char* path, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  const int fd = static_cast<int>(fi->fh);
  size_t limit = size;
  if (int rc = inject("read", path, &limit, fd); rc != 0) {
    return rc;
  }
  const ssize_t n = pread(fd, buf, limit, offset);
  if (n < 0) {
    return err();
  }
  state().count_read(path, static_cast<size_t>(n));
  return static_cast<int>(n);
}

int op_write(const char* path, const char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  if (int rc = inject("write", path); rc != 0) {
    return rc;
  }
  const ssize_t n = pwrite(static_cast<int>(fi->fh), buf, size, offset);
  return n < 0 ? err() : static_cast<int>(n);
}

int op_release(const char* /*path*/, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  return 0;
}

int op_fsync(const char* path, int datasync, fuse_file_info* fi) {
  if (int rc = inject("fsync", path); rc != 0) {
    return rc;
  }
  const int fd = static_cast<int>(fi->fh);
  return (datasync != 0 ? fdatasync(fd) : fsync(fd)) == 0 ? 0 : err();
}

int op_mkdir(const char* path, mode_t mode) {
  if (int rc = inject("mkdir", path); rc != 0) {
    return rc;
  }
  return mkdirat(state().root(), rel(path).c_str(), mode) == 0 ? 0 : err();
}

int op_unlink(const char* path) {
  if (int rc = inject("unlink", path); rc != 0) {
    return rc;
  }
  return unlinkat(state().root(), rel(path).c_str(), 0) == 0 ? 0 : err();
}

int op_rmdir(const char* path) {
  if (int rc = inject("unlink", path); rc != 0) {
    return rc;
  }
  return unlinkat(state().root(), rel(path).c_str(), AT_REMOVEDIR) == 0 ? 0 : err();
}

int op_rename(const char* from, const char* to, unsigned int flags) {
  if (int rc = inject("rename", from); rc != 0) {
    return rc;
  }
  return renameat2(state().root(), rel(from).c_str(), state().root(), rel(to).c_str(), flags) == 0
             ? 0
             : err();
}

int op_truncate(const char* path, off_t size, fuse_file_info* fi) {
  const int r =
      fi != nullptr
          ? ftruncate(static_cast<int>(fi->fh), size)
          : truncate(
                (std::string("/proc/self/fd/") + std::to_string(state().root()) + path).c_str(),
                size);
  return r == 0 ? 0 : err();
}

int op_chmod(const char* path, mode_t mode, fuse_file_info* /*fi*/) {
  return fchmodat(state().root(), rel(path).c_str(), mode, 0) == 0 ? 0 : err();
}

int op_utimens(const char* path, const timespec tv[2], fuse_file_info* /*fi*/) {
  return utimensat(state().root(), rel(path).c_str(), tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : err();
}

int op_statfs(const char* path, struct statvfs* st) {
  if (int rc = inject("statfs", path); rc != 0) {
    return rc;
  }
  return fstatvfs(state().root(), st) == 0 ? 0 : err();
}

int op_setxattr(const char* path, const char* name, const char* value, size_t size, int /*flags*/) {
  if (strcmp(name, kRulesXattr) == 0) {
    return state().set_rules(std::string(value, size)) ? 0 : -EINVAL;
  }
  if (strcmp(name, kReleaseXattr) == 0) {
    state().release();
    return 0;
  }
  (void)path;
  return -ENOTSUP;
}

int op_getxattr(const char* path, const char* name, char* value, size_t size) {
  if (strcmp(name, kStatsXattr) != 0) {
    // The source's own attributes.
    const std::string proc =
        "/proc/self/fd/" + std::to_string(state().root()) + (path[1] == '\0' ? "" : path);
    const ssize_t n = lgetxattr(proc.c_str(), name, value, size);
    return n < 0 ? err() : static_cast<int>(n);
  }
  const std::string json = state().stats_json();
  if (size == 0) {
    return static_cast<int>(json.size());
  }
  if (size < json.size()) {
    return -ERANGE;
  }
  memcpy(value, json.data(), json.size());
  return static_cast<int>(json.size());
}

int op_access(const char* path, int mask) {
  return faccessat(state().root(), rel(path).c_str(), mask, AT_EACCESS) == 0 ? 0 : err();
}

void* op_init(fuse_conn_info* /*conn*/, fuse_config* cfg) {
  // Every operation reaches the rules: no kernel caching of names or attributes.
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->use_ino = 1;
  // A file removed while open goes at once, as on a local disk (no .fuse_hidden files that
  // would keep its directory from being removed).
  cfg->hard_remove = 1;
  return fuse_get_context()->private_data;
}

fuse_operations make_operations() {
  fuse_operations ops{};
  ops.init = op_init;
  ops.getattr = op_getattr;
  ops.readlink = op_readlink;
  ops.readdir = op_readdir;
  ops.open = op_open;
  ops.create = op_create;
  ops.read = op_read;
  ops.write = op_write;
  ops.release = op_release;
  ops.fsync = op_fsync;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.rename = op_rename;
  ops.truncate = op_truncate;
  ops.chmod = op_chmod;
  ops.utimens = op_utimens;
  ops.statfs = op_statfs;
  ops.setxattr = op_setxattr;
  ops.getxattr = op_getxattr;
  ops.access = op_access;
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("A FUSE passthrough that injects faults by rules (reliability tests)");
  std::string source;
  std::string mountpoint;
  std::string rules_file;
  unsigned threads = 256;
  app.add_option("source", source)->required()->check(CLI::ExistingDirectory);
  app.add_option("mountpoint", mountpoint)->required()->check(CLI::ExistingDirectory);
  app.add_option("--rules", rules_file, "Initial rules, one per line")->check(CLI::ExistingFile);
  app.add_option("--threads", threads, "Worker threads (hung requests each hold one)")
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  const int root_fd = open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    fprintf(stderr, "epochfs-faultfs: %s: %s\n", source.c_str(), strerror(errno));
    return 1;
  }
  State s(root_fd);
  if (!rules_file.empty()) {
    std::ifstream in(rules_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!s.set_rules(text.str())) {
      return 2;
    }
  }
  const char* fuse_argv[] = {"epochfs-faultfs", "-o",
                             "fsname=faultfs,subtype=faultfs,default_permissions,allow_other"};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(fuse_argv));
  const fuse_operations ops = make_operations();
  fuse* f = fuse_new(&args, &ops, sizeof(ops), &s);
  if (f == nullptr) {
    return 1;
  }
  int rc = 1;
  if (fuse_set_signal_handlers(fuse_get_session(f)) == 0) {
    if (fuse_mount(f, mountpoint.c_str()) == 0) {
      fuse_loop_config* cfg = fuse_loop_cfg_create();
      fuse_loop_cfg_set_max_threads(cfg, threads);
      rc = fuse_loop_mt(f, cfg) == 0 ? 0 : 1;
      fuse_loop_cfg_destroy(cfg);
      fuse_unmount(f);
    }
    fuse_remove_signal_handlers(fuse_get_session(f));
  }
  fuse_destroy(f);
  close(root_fd);
  return rc;
}
