// Logging for the daemon and tools: one line per event, to stderr or to syslog.
//
// The sink is chosen once at startup (set_log_sink) before any thread starts; after that,
// log() may be called from any thread. printf-style so it costs nothing when filtered out.
#pragma once

namespace epochfs::cachestore {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

enum class LogSink { kStderr, kSyslog };

// Not thread-safe: call before starting threads.
void set_log_sink(LogSink sink, const char* ident);
void set_log_level(LogLevel level);

bool log_enabled(LogLevel level);

void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace epochfs::cachestore
