#include "fusefs/kernel_readahead.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "cachestore/log.h"
#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::fusefs {

using cachestore::LogLevel;

KernelReadahead::KernelReadahead(const std::string& devno, unsigned kb) : kb_(kb) {
  if (kb > 0 && !devno.empty()) {
    path_ = "/sys/class/bdi/" + devno + "/read_ahead_kb";
  }
}

void KernelReadahead::set() const {
  if (path_.empty()) {
    return;
  }
  const std::string text = std::to_string(kb_) + "\n";
  const cachestore::UniqueFd fd(::open(path_.c_str(), O_WRONLY | O_CLOEXEC));
  const bool ok = fd.get() >= 0 &&
                  ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (ok) {
    cachestore::log(LogLevel::kInfo, "the kernel reads up to %u KiB ahead in the mount's files",
                    kb_);
  } else {
    cachestore::log(LogLevel::kInfo, "readahead left at the kernel's: cannot write %s: %s",
                    path_.c_str(), cachestore::error_text(errno).c_str());
  }
}

}  // namespace epochfs::fusefs
