#include "prefetch/blocks.h"

#include <algorithm>
#include <charconv>

namespace epochfs::prefetch {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// Leading decimal digits of *text as a number, consumed with the blanks after them.
std::optional<uint64_t> take_number(std::string_view* text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end == text->data()) {
    return std::nullopt;
  }
  const size_t digits = static_cast<size_t>(end - text->data());
  size_t blanks = 0;
  while (digits + blanks < text->size() && is_blank((*text)[digits + blanks])) {
    ++blanks;
  }
  if (blanks == 0) {
    return std::nullopt;  // a number must be followed by blanks, then more
  }
  text->remove_prefix(digits + blanks);
  return v;
}

}  // namespace

std::optional<Range> parse_range(std::string_view text, const char** why) {
  while (!text.empty() && is_blank(text.front())) {
    text.remove_prefix(1);
  }
  Range r;
  auto offset = take_number(&text);
  auto length = offset ? take_number(&text) : std::nullopt;
  if (!offset || !length || text.empty()) {
    *why = "not a range (OFFSET LENGTH PATH)";
    return std::nullopt;
  }
  if (*length == 0 || *length > kMaxRangeBytes) {
    *why = "range length not between 1 byte and 1 GiB";
    return std::nullopt;
  }
  if (*offset > (uint64_t{1} << 62) - *length) {
    *why = "range ends past 2^62";
    return std::nullopt;
  }
  r.offset = *offset;
  r.length = *length;
  r.path = text;
  return r;
}

std::string format_range(uint64_t offset, uint64_t length, std::string_view path) {
  std::string out = std::to_string(offset) + " " + std::to_string(length) + " ";
  out.append(path);
  return out;
}

std::string block_key(std::string_view path, uint64_t block) {
  std::string key(path);
  key += "//";
  key += std::to_string(block);
  return key;
}

std::optional<BlockOf> parse_block_key(std::string_view key) {
  const size_t at = key.rfind("//");
  if (at == std::string_view::npos || at == 0 || at + 2 == key.size()) {
    return std::nullopt;
  }
  BlockOf b;
  const char* begin = key.data() + at + 2;
  auto [end, ec] = std::from_chars(begin, key.data() + key.size(), b.block);
  if (ec != std::errc() || end != key.data() + key.size()) {
    return std::nullopt;
  }
  b.path.assign(key.substr(0, at));
  return b;
}

cachestore::FileVersion block_version(const cachestore::FileVersion& file, uint64_t block) {
  cachestore::FileVersion v = file;
  const auto start = static_cast<int64_t>(block * kBlockBytes);
  v.size = std::clamp<int64_t>(file.size - start, 0, static_cast<int64_t>(kBlockBytes));
  return v;
}

}  // namespace epochfs::prefetch
