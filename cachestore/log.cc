#include "cachestore/log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cachestore/sync.h"

namespace epochfs::cachestore {
namespace {

LogSink g_sink = LogSink::kStderr;
// Relaxed: the level is a filter; a reader seeing an old value only logs one line more or less.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

// kFile: the fd stays the same number for the process's life; a reopen dup2()s the new file
// onto it, so a writer never sees a closed or reused fd.
std::string g_file_path;
int g_file_fd = -1;
std::atomic<int64_t> g_next_reopen_check_ns{0};
constexpr int64_t kReopenCheckNs = 1'000'000'000;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

int syslog_priority(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return LOG_ERR;
    case LogLevel::kWarning:
      return LOG_WARNING;
    case LogLevel::kInfo:
      return LOG_INFO;
    case LogLevel::kDebug:
      return LOG_DEBUG;
  }
  return LOG_INFO;
}

// logrotate renames (or removes) the file and expects the writer to start a new one.
void reopen_if_rotated() {
  const int64_t now = now_ns();
  int64_t due = g_next_reopen_check_ns.load(std::memory_order_relaxed);
  if (now < due || !g_next_reopen_check_ns.compare_exchange_strong(due, now + kReopenCheckNs)) {
    return;
  }
  struct stat at_path;
  struct stat open_file;
  if (::stat(g_file_path.c_str(), &at_path) == 0 && ::fstat(g_file_fd, &open_file) == 0 &&
      at_path.st_ino == open_file.st_ino && at_path.st_dev == open_file.st_dev) {
    return;
  }
  const int fd = ::open(g_file_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd >= 0) {
    ::dup2(fd, g_file_fd);
    ::close(fd);
  }
}

void write_to_file(LogLevel level, const std::string& text) {
  reopen_if_rotated();
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm local;
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  char zone[8];
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &local);
  strftime(zone, sizeof(zone), "%z", &local);
  char head[96];
  snprintf(head, sizeof(head), "%s.%03ld%s epochfs[%d] %s: ", stamp, now.tv_nsec / 1'000'000, zone,
           static_cast<int>(getpid()), level_name(level));
  // One write per line with O_APPEND keeps lines from threads (and processes) whole.
  const std::string line = head + text + "\n";
  [[maybe_unused]] const ssize_t n = ::write(g_file_fd, line.data(), line.size());
}

void write_line(LogLevel level, const std::string& text) {
  switch (g_sink) {
    case LogSink::kSyslog:
      syslog(syslog_priority(level), "%s", text.c_str());
      break;
    case LogSink::kFile:
      write_to_file(level, text);
      break;
    case LogSink::kStderr:
      // One fprintf per line keeps lines from different threads whole.
      fprintf(stderr, "epochfs: %s: %s\n", level_name(level), text.c_str());
      break;
  }
}

// The lines of one call site in its current window.
struct Site {
  int64_t window_start_ns = 0;
  int shown = 0;
  uint64_t cut = 0;
  LogLevel level = LogLevel::kInfo;
  std::string last;  // the last line cut
};

struct Report {
  LogLevel level;
  std::string text;
};

class Limiter {
 public:
  // Decides whether a line of the call site site_key is shown; adds to *reports the counts of
  // windows that have ended (at the latest when they are due).
  bool admit(const void* site_key, LogLevel level, const std::string& text,
             std::vector<Report>* reports) {
    MutexLock lock(mu_);
    const int64_t now = now_ns();
    collect(now, false, reports);
    Site& site = sites_[site_key];
    if (site.window_start_ns == 0) {
      site.window_start_ns = now;
    }
    if (site.shown < kLogBurst) {
      ++site.shown;
      return true;
    }
    ++site.cut;
    site.level = level;
    site.last = text;
    return false;
  }

  void start() {
    MutexLock lock(mu_);
    if (!flusher_.joinable()) {
      stopping_ = false;
      flusher_ = std::thread([this] { run(); });
    }
  }

  void stop() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      wake_.notify_all();
    }
    if (flusher_.joinable()) {
      flusher_.join();
    }
    std::vector<Report> reports;
    {
      MutexLock lock(mu_);
      collect(now_ns(), true, &reports);
    }
    write(reports);
  }

  static void write(const std::vector<Report>& reports) {
    for (const auto& r : reports) {
      write_line(r.level, r.text);
    }
  }

 private:
  void run() {
    while (true) {
      std::vector<Report> reports;
      bool stopping = false;
      {
        MutexLock lock(mu_);
        if (!stopping_) {
          wake_.wait_for(std::chrono::seconds(1));
        }
        stopping = stopping_;
        collect(now_ns(), false, &reports);
      }
      write(reports);
      if (stopping) {
        return;
      }
    }
  }

  // Ends the windows past their time (every window if all): a count for each that cut lines.
  void collect(int64_t now, bool all, std::vector<Report>* reports) REQUIRES(mu_) {
    const int64_t window_ns = std::chrono::nanoseconds(kLogWindow).count();
    for (auto it = sites_.begin(); it != sites_.end();) {
      const Site& s = it->second;
      if (!all && now - s.window_start_ns < window_ns) {
        ++it;
        continue;
      }
      if (s.cut > 0) {
        const double seconds = static_cast<double>(now - s.window_start_ns) / 1e9;
        char head[96];
        snprintf(head, sizeof(head), "%llu more like this in the last %.0f s, the last: ",
                 static_cast<unsigned long long>(s.cut), seconds);
        reports->push_back({s.level, head + s.last});
      }
      it = sites_.erase(it);
    }
  }

  Mutex mu_;
  CondVar wake_{&mu_};
  std::unordered_map<const void*, Site> sites_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread flusher_;
};

// Never destroyed: threads may log while static destructors run.
Limiter& limiter() {
  static Limiter* const l = new Limiter;
  return *l;
}

}  // namespace

std::string escape_log_line(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  for (const char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

void set_log_sink(LogSink sink, const char* ident) {
  g_sink = sink;
  if (sink == LogSink::kSyslog) {
    openlog(ident, LOG_PID, LOG_DAEMON);
  }
}

bool open_log_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return false;
  }
  g_file_path = path;
  g_file_fd = fd;
  g_next_reopen_check_ns.store(now_ns() + kReopenCheckNs);
  return true;
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void log(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) {
    return;
  }
  char line[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  const std::string text = escape_log_line(line);
  if (level == LogLevel::kDebug) {
    write_line(level, text);
    return;
  }
  std::vector<Report> reports;
  // The caller's address tells call sites apart, also those sharing a format such as "%s".
  const bool shown = limiter().admit(__builtin_return_address(0), level, text, &reports);
  Limiter::write(reports);
  if (shown) {
    write_line(level, text);
  }
}

void start_log_flusher() { limiter().start(); }

void stop_log_flusher() { limiter().stop(); }

}  // namespace epochfs::cachestore
