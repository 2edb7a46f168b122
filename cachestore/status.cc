#include "cachestore/status.h"

#include <string.h>

namespace epochfs::cachestore {

std::string Status::to_string() const {
  if (is_ok()) {
    return "ok";
  }
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* msg = strerror_r(errno_, buf, sizeof(buf));
  return context_.empty() ? std::string(msg) : context_ + ": " + msg;
}

}  // namespace epochfs::cachestore
