#include "cachestore/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

#include <atomic>

namespace epochfs::cachestore {
namespace {

LogSink g_sink = LogSink::kStderr;
// Relaxed: the level is a filter; a reader seeing an old value only logs one line more or less.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

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

}  // namespace

void set_log_sink(LogSink sink, const char* ident) {
  g_sink = sink;
  if (sink == LogSink::kSyslog) {
    openlog(ident, LOG_PID, LOG_DAEMON);
  }
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
  if (g_sink == LogSink::kSyslog) {
    syslog(syslog_priority(level), "%s", line);
  } else {
    // One fprintf per line keeps lines from different threads whole.
    fprintf(stderr, "epochfs: %s: %s\n", level_name(level), line);
  }
}

}  // namespace epochfs::cachestore
