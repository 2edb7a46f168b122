#include "cachestore/path.h"

#include <limits.h>

namespace epochfs::cachestore {

bool is_valid_name(std::string_view name) {
  if (name.empty() || name.size() > NAME_MAX || name == "." || name == "..") {
    return false;
  }
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

bool is_valid_relative_path(std::string_view path) {
  if (path.empty()) {
    return true;
  }
  if (path.size() >= PATH_MAX) {
    return false;
  }
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (!is_valid_name(path.substr(start, end - start))) {
      return false;
    }
    if (slash == std::string_view::npos) {
      return true;
    }
    start = slash + 1;
  }
}

std::string join_path(std::string_view parent, std::string_view name) {
  std::string out;
  out.reserve(parent.size() + 1 + name.size());
  out.append(parent);
  if (!parent.empty()) {
    out.push_back('/');
  }
  out.append(name);
  return out;
}

}  // namespace epochfs::cachestore
