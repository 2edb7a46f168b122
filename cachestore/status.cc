#include "cachestore/status.h"

#include <string.h>

namespace epochfs::cachestore {

std::string error_text(int err) {
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  return strerror_r(err, buf, sizeof(buf));
}

std::string Status::to_string() const {
  if (is_ok()) {
    return "ok";
  }
  const std::string msg = error_text(errno_);
  return context_.empty() ? msg : context_ + ": " + msg;
}

}  // namespace epochfs::cachestore
