#include "cachestore/index_file.h"

#include <cstdio>
#include <sstream>

#include <xxhash.h>

#include "cachestore/hex.h"

namespace epochfs::cachestore {
namespace {

constexpr char kMagic[] = "epochfs-cache-index";

std::string escape(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) {
      return std::nullopt;
    }
    if (text[i] == '\\') {
      out += '\\';
    } else if (text[i] == 'n') {
      out += '\n';
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::optional<KeptCopy> parse_line(const std::string& line) {
  KeptCopy c;
  char hash[17] = {};
  long long size = 0, mtime = 0, ctime = 0;
  unsigned long long ino = 0, dev = 0;
  int consumed = 0;
  if (sscanf(line.c_str(), "%16s %lld %lld %lld %llu %llu %n", hash, &size, &mtime, &ctime, &ino,
             &dev, &consumed) != 6 ||
      consumed <= 0 || size < 0) {
    return std::nullopt;
  }
  auto path = unescape(line.substr(static_cast<size_t>(consumed)));
  if (!path || path->empty()) {
    return std::nullopt;
  }
  c.path = *path;
  c.hash = std::stoull(hash, nullptr, 16);
  c.size = static_cast<uint64_t>(size);
  c.version = FileVersion{size, mtime, ctime, ino, dev};
  return c;
}

}  // namespace

std::string format_index(const std::vector<KeptCopy>& copies) {
  std::ostringstream out;
  out << kMagic << " " << kIndexFormatVersion << "\n";
  for (const auto& c : copies) {
    out << hex64(c.hash) << " " << c.size << " " << c.version.mtime_ns << " " << c.version.ctime_ns
        << " " << c.version.ino << " " << c.version.dev << " " << escape(c.path) << "\n";
  }
  std::string body = out.str();
  body += "end " + std::to_string(copies.size()) + " " +
          hex64(XXH3_64bits(body.data(), body.size())) + "\n";
  return body;
}

std::optional<std::vector<KeptCopy>> parse_index(const std::string& text) {
  const size_t end_at = text.rfind("end ");
  if (end_at == std::string::npos || (end_at > 0 && text[end_at - 1] != '\n')) {
    return std::nullopt;
  }
  const std::string body = text.substr(0, end_at);
  unsigned long long count = 0;
  char hash[17] = {};
  if (sscanf(text.c_str() + end_at, "end %llu %16s", &count, hash) != 2 ||
      hex64(XXH3_64bits(body.data(), body.size())) != hash) {
    return std::nullopt;
  }
  std::istringstream lines(body);
  std::string line;
  if (!std::getline(lines, line) ||
      line != std::string(kMagic) + " " + std::to_string(kIndexFormatVersion)) {
    return std::nullopt;
  }
  std::vector<KeptCopy> copies;
  while (std::getline(lines, line)) {
    auto c = parse_line(line);
    if (!c) {
      return std::nullopt;
    }
    copies.push_back(std::move(*c));
  }
  if (copies.size() != count) {
    return std::nullopt;
  }
  return copies;
}

}  // namespace epochfs::cachestore
