// Parsing sizes and percentages given on the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace epochfs::tools {

// "300G", "512M", "1.5T", "64K", "4096" (bytes; binary units, case-insensitive, optional
// trailing "B" or "iB"). nullopt if malformed or negative.
std::optional<uint64_t> parse_size(const std::string& text);

// "5%" or "5" -> 0.05. nullopt unless 0 <= value < 100.
std::optional<double> parse_percent(const std::string& text);

}  // namespace epochfs::tools
