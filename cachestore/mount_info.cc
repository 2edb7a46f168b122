#include "cachestore/mount_info.h"

#include <fstream>
#include <sstream>

namespace epochfs::cachestore {
namespace {

constexpr char kTable[] = "/proc/self/mountinfo";

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

// The next line of the table as an entry; false at its end.
bool next_entry(std::istream& in, MountEntry& entry) {
  std::string line;
  if (!std::getline(in, line)) {
    return false;
  }
  // id parent major:minor root mountpoint options [optional...] - fstype source superopts
  std::istringstream fields(line);
  std::string skipped;
  fields >> skipped >> skipped >> entry.devno >> skipped >> entry.mountpoint;
  entry.mountpoint = unescape_octal(entry.mountpoint);
  std::string word;
  while (fields >> word && word != "-") {
  }
  entry.type.clear();
  fields >> entry.type;
  return true;
}

}  // namespace

std::optional<MountEntry> mount_in(std::istream& mountinfo, const std::string& path) {
  std::optional<MountEntry> found;
  MountEntry entry;
  while (next_entry(mountinfo, entry)) {
    if (entry.mountpoint == path) {
      found = entry;  // the last one listed is the one on top
    }
  }
  return found;
}

std::optional<MountEntry> mount_at(const std::string& path) {
  std::ifstream in(kTable);
  return mount_in(in, path);
}

bool device_in(std::istream& mountinfo, const std::string& devno) {
  MountEntry entry;
  while (next_entry(mountinfo, entry)) {
    if (entry.devno == devno) {
      return true;
    }
  }
  return false;
}

bool device_mounted(const std::string& devno) {
  std::ifstream in(kTable);
  return device_in(in, devno);
}

}  // namespace epochfs::cachestore
