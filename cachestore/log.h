// Logging for the daemon and tools: one line per event, to stderr, a file or syslog.
//
// The sink is chosen once at startup (set_log_sink, open_log_file) before any thread starts;
// after that, log() may be called from any thread. printf-style so it costs nothing when
// filtered out.
//
// Storms are cut down: each call site logs at most kLogBurst lines per
// kLogWindow; the lines past that are counted and reported as one line when the window ends
// ("... 3412 more like this in the last 60 s, the last: ..."). Debug lines are never cut.
// Control characters in a line (a path with a newline, an escape sequence) are written as
// \xNN, so a file name cannot forge or garble log lines.
#pragma once

#include <chrono>
#include <string>

namespace epochfs::cachestore {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

enum class LogSink { kStderr, kSyslog, kFile };

inline constexpr int kLogBurst = 5;
inline constexpr auto kLogWindow = std::chrono::seconds(60);

// Not thread-safe: call before starting threads. kFile needs open_log_file first.
void set_log_sink(LogSink sink, const char* ident);
void set_log_level(LogLevel level);

// Appends to path from now on (created 0640 if missing). A file renamed or removed by
// logrotate is noticed within a second and reopened at path. Returns false with errno set.
bool open_log_file(const std::string& path);

bool log_enabled(LogLevel level);

void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Starts the thread that reports the counts of cut lines when their window ends (without it,
// they are reported with the next line logged). Call after the daemon has forked.
void start_log_flusher();

// Reports every pending count now and stops the flusher: call before exiting.
void stop_log_flusher();

// The line as log() writes it: control characters, backslash and DEL as \xNN.
std::string escape_log_line(const std::string& line);

}  // namespace epochfs::cachestore
