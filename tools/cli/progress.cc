#include "tools/cli/progress.h"

#include <stdio.h>
#include <unistd.h>

namespace epochfs::tools {

Progress::Progress() : terminal_(isatty(STDERR_FILENO) == 1) {}

void Progress::show(const std::string& line, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!terminal_ || (!force && shown_ && now - last_ < kInterval)) {
    return;
  }
  // Back to the line's start, the new text, and the rest of the old one erased.
  fprintf(stderr, "\r%s\033[K", line.c_str());
  fflush(stderr);
  shown_ = true;
  last_ = now;
}

void Progress::clear() {
  if (shown_) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    shown_ = false;
  }
}

}  // namespace epochfs::tools
