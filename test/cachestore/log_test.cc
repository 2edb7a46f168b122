#include "cachestore/log.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
  }
  return lines;
}

size_t count_containing(const std::vector<std::string>& lines, const std::string& text) {
  size_t n = 0;
  for (const auto& l : lines) {
    n += l.find(text) != std::string::npos ? 1 : 0;
  }
  return n;
}

// Logs to a fresh file for one test, and back to stderr after it.
class FileSink {
 public:
  FileSink() {
    char tmpl[] = "/tmp/epochfs-log-XXXXXX";
    const int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    path_ = tmpl;
    REQUIRE(open_log_file(path_));
    set_log_sink(LogSink::kFile, "epochfs-test");
  }

  ~FileSink() {
    stop_log_flusher();
    set_log_sink(LogSink::kStderr, "epochfs-test");
    unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void log_storm(int lines) {
  for (int i = 0; i < lines; ++i) {
    log(LogLevel::kWarning, "source: open f%d: Input/output error", i);
  }
}

}  // namespace

TEST_CASE("a storm of lines from one place becomes a few lines and a count", "[log]") {
  FileSink sink;
  log_storm(1000);
  log(LogLevel::kWarning, "another problem");
  stop_log_flusher();  // reports what is pending
  const auto lines = lines_of(sink.path());
  CHECK(count_containing(lines, "source: open f") == static_cast<size_t>(kLogBurst) + 1);
  CHECK(count_containing(lines, "995 more like this in the last") == 1);
  CHECK(count_containing(lines, "the last: source: open f999: Input/output error") == 1);
  CHECK(count_containing(lines, "another problem") == 1);
  // Each line: a timestamp, the program and pid, the level.
  REQUIRE_FALSE(lines.empty());
  CHECK(lines[0].find(" epochfs[" + std::to_string(getpid()) + "] warning: source: open f0") !=
        std::string::npos);
  CHECK(lines[0].substr(0, 2) == "20");
  CHECK(lines[0][10] == 'T');
}

TEST_CASE("control characters in a logged path cannot forge a line", "[log]") {
  FileSink sink;
  log(LogLevel::kWarning, "open %s failed", "a\nepochfs[1] error: forged\x1b[2J\\");
  const auto lines = lines_of(sink.path());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find(R"(open a\x0aepochfs[1] error: forged\x1b[2J\x5c failed)") !=
        std::string::npos);
  CHECK(escape_log_line("plain é") == "plain é");
}

TEST_CASE("a log file renamed by logrotate is reopened at its path", "[log]") {
  FileSink sink;
  log(LogLevel::kWarning, "before the rotation");
  const std::string rotated = sink.path() + ".1";
  REQUIRE(rename(sink.path().c_str(), rotated.c_str()) == 0);
  // The path is checked at most once a second.
  sleep(2);
  log(LogLevel::kWarning, "after the rotation");
  CHECK(count_containing(lines_of(rotated), "before the rotation") == 1);
  CHECK(count_containing(lines_of(rotated), "after the rotation") == 0);
  CHECK(count_containing(lines_of(sink.path()), "after the rotation") == 1);
  unlink(rotated.c_str());
}

TEST_CASE("debug lines are never cut", "[log]") {
  FileSink sink;
  set_log_level(LogLevel::kDebug);
  for (int i = 0; i < 50; ++i) {
    log(LogLevel::kDebug, "request %d", i);
  }
  set_log_level(LogLevel::kInfo);
  CHECK(count_containing(lines_of(sink.path()), "request ") == 50);
}

}  // namespace epochfs::cachestore
