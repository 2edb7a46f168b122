#include "cachestore/mount_info.h"

#include <fstream>
#include <sstream>

namespace epochfs::cachestore {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<MountEntry> mount_in(std::string_view mountinfo, const std::string& path) {
  std::istringstream in{std::string(mountinfo)};
  std::string line;
  std::optional<MountEntry> found;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional...] - fstype source superopts
    std::istringstream fields(line);
    std::string id, parent, devno, root, mountpoint;
    fields >> id >> parent >> devno >> root >> mountpoint;
    if (unescape_octal(mountpoint) != path) {
      continue;
    }
    std::string word;
    while (fields >> word && word != "-") {
    }
    std::string type;
    fields >> type;
    found = MountEntry{devno, type};  // the last one listed is the one on top
  }
  return found;
}

std::optional<MountEntry> mount_at(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  return mount_in(text.str(), path);
}

}  // namespace epochfs::cachestore
