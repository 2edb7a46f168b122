#include "tools/cli/size_parse.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace epochfs::tools {

std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  std::string unit(end);
  for (char& c : unit) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "IB")) {
    unit = unit.substr(0, 1);
  }
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K") {
    scale = 1024.0;
  } else if (unit == "M") {
    scale = 1024.0 * 1024;
  } else if (unit == "G") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  const double bytes = value * scale;
  if (bytes >= 1.8e19) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

std::optional<double> parse_percent(const std::string& text) {
  std::string number = text;
  if (!number.empty() && number.back() == '%') {
    number.pop_back();
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !(value >= 0 && value < 100)) {
    return std::nullopt;
  }
  return value / 100;
}

}  // namespace epochfs::tools
