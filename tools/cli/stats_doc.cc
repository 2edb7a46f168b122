#include "tools/cli/stats_doc.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace epochfs::tools {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  bool object(const std::string& prefix, StatsDoc& doc) {
    if (!eat('{')) {
      return false;
    }
    if (eat('}')) {
      return true;
    }
    do {
      std::string key;
      if (!string(key) || !eat(':')) {
        return false;
      }
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      skip_space();
      if (peek() == '{') {
        if (!object(path, doc)) {
          return false;
        }
      } else {
        std::string value;
        if (!scalar(value)) {
          return false;
        }
        doc.values[path] = value;
      }
    } while (eat(','));
    return eat('}');
  }

  bool at_end() {
    skip_space();
    return i_ == s_.size();
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) {
      ++i_;
    }
  }

  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }

  bool eat(char c) {
    skip_space();
    if (peek() != c) {
      return false;
    }
    ++i_;
    return true;
  }

  bool string(std::string& out) {
    if (!eat('"')) {
      return false;
    }
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        ++i_;
      }
      out.push_back(s_[i_++]);
    }
    return eat('"');
  }

  bool scalar(std::string& out) {
    skip_space();
    if (peek() == '"') {
      return string(out);
    }
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' &&
           !std::isspace(static_cast<unsigned char>(s_[i_]))) {
      out.push_back(s_[i_++]);
    }
    return !out.empty();
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<double> StatsDoc::number(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0') {
    return std::nullopt;
  }
  return v;
}

std::optional<StatsDoc> parse_stats(const std::string& json) {
  StatsDoc doc;
  Parser p(json);
  if (!p.object("", doc) || !p.at_end()) {
    return std::nullopt;
  }
  return doc;
}

std::optional<StatsDoc> read_stats(const std::string& mountpoint) {
  std::ifstream in(mountpoint + "/.epochfs/stats");
  if (!in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_stats(text.str());
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace epochfs::tools
