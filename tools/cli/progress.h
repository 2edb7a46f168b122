// Progress: one line on a terminal that says how far a long command has got (`epochfs
// verify` of a million copies, `unmount` waiting for the daemon to give its cache up, `clean`
// removing a large leftover), rewritten in place on stderr and wiped when done. On anything
// but a terminal (a log, a pipe, a Slurm epilog) it shows nothing: scripts read only the
// commands' final lines.
#pragma once

#include <chrono>
#include <string>

namespace epochfs::tools {

class Progress {
 public:
  Progress();

  ~Progress() { clear(); }

  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Shows line in place of the last one; at most every kInterval unless forced.
  void show(const std::string& line, bool force = false);
  // Wipes the line shown, if any: what is printed next starts on a clean line.
  void clear();

  static constexpr auto kInterval = std::chrono::milliseconds(200);

 private:
  const bool terminal_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace epochfs::tools
