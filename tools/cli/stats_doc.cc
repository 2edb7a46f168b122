#include "tools/cli/stats_doc.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace epochfs::tools {
namespace {

// Every scalar under value, keyed by its dotted path: strings as their text, numbers, booleans
// and null as JSON writes them. False if an array is met (the daemon writes none).
bool flatten(const nlohmann::json& value, const std::string& path, StatsDoc& doc) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      if (!flatten(child, path.empty() ? key : path + "." + key, doc)) {
        return false;
      }
    }
    return true;
  }
  if (value.is_array()) {
    return false;
  }
  doc.values[path] = value.is_string() ? value.get<std::string>() : value.dump();
  return true;
}

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

bool StatsDoc::is_true(const std::string& key) const {
  auto it = values.find(key);
  return it != values.end() && it->second == "true";
}

std::optional<StatsDoc> parse_stats(const std::string& json) {
  const auto value = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  StatsDoc doc;
  if (!value.is_object() || !flatten(value, "", doc)) {
    return std::nullopt;  // not JSON (a truncated read, say), or not the daemon's shape
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
