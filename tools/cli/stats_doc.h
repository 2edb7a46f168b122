// Reading the daemon's stats document (<mount>/.epochfs/stats) back: a flat view of its
// numbers, keyed by dotted path ("cache.used_bytes"). Parsed with nlohmann-json; the document
// has objects, numbers, strings, booleans and null, no arrays.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace epochfs::tools {

struct StatsDoc {
  std::map<std::string, std::string> values;  // dotted key -> text of the value

  // The value at key as a number; nullopt if absent or not a number.
  std::optional<double> number(const std::string& key) const;
  // True if the value at key is the boolean true.
  bool is_true(const std::string& key) const;
};

// Parses the document; nullopt if it is not the shape the daemon writes.
std::optional<StatsDoc> parse_stats(const std::string& json);

// Reads and parses <mountpoint>/.epochfs/stats.
std::optional<StatsDoc> read_stats(const std::string& mountpoint);

// bytes as "12.3 MiB" (binary units; "512 B" below a KiB).
std::string human_bytes(double bytes);

}  // namespace epochfs::tools
