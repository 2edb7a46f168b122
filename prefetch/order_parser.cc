#include "prefetch/order_parser.h"

#include <errno.h>

#include <charconv>

#include "prefetch/blocks.h"

namespace epochfs::prefetch {
namespace {

constexpr size_t kMaxStreamIdBytes = 64;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_space(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  if (s.empty() || s.front() == '+' || s.front() == '-') {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

bool valid_stream_id(std::string_view s) {
  if (s.empty() || s.size() > kMaxStreamIdBytes) {
    return false;
  }
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

// A range's path normalised, and refused where it starts with a blank: "./\tx" normalises to
// "\tx", which the range's own blanks would swallow when the entry is read back.
std::optional<std::string> normalise_range_path(std::string_view path, const char** why) {
  auto normal = normalise_relative(path, why);
  if (normal && (normal->front() == ' ' || normal->front() == '\t')) {
    *why = "range path starts with a blank";
    return std::nullopt;
  }
  return normal;
}

}  // namespace

std::string escape_for_log(std::string_view text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > max_bytes) {
    out += "...";
  }
  return out;
}

void RejectReport::add(uint64_t line, std::string_view reason, std::string_view text) {
  ++total;
  if (examples.size() < kExamples) {
    examples.push_back("line " + std::to_string(line) + ": " + std::string(reason) + ": " +
                       escape_for_log(text));
  }
}

bool valid_utf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) {
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) {
        return false;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::optional<std::string> normalise_relative(std::string_view path, const char** why) {
  if (!path.empty() && path.front() == '/') {
    *why = "absolute path";
    return std::nullopt;
  }
  std::string out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty() || part == ".") {
      continue;
    }
    if (part == "..") {
      *why = "escapes the root (..)";
      return std::nullopt;
    }
    if (!out.empty()) {
      out += '/';
    }
    out.append(part);
  }
  if (out.empty()) {
    *why = "names the root, not a file";
    return std::nullopt;
  }
  const std::string_view control(kControlDirName);
  if (out.starts_with(control) && (out.size() == control.size() || out[control.size()] == '/')) {
    *why = "names the mount's control directory";
    return std::nullopt;
  }
  return out;
}

std::optional<uint32_t> parse_index(std::string_view text) {
  auto v = parse_u64(text);
  if (!v || *v > UINT32_MAX) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(*v);
}

OrderParser::OrderParser(EntrySink sink, RejectReport* rejects, OrderForm default_form)
    : sink_(std::move(sink)), rejects_(rejects), default_form_(default_form) {}

void OrderParser::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    // Keep at most one byte past the limit: enough to know the line is too long, and its first
    // byte says whether it was a comment.
    if (!overlong_) {
      const size_t room = kMaxLineBytes + 1 - partial_.size();
      partial_.append(piece.substr(0, room));
      overlong_ = partial_.size() > kMaxLineBytes;
    }
    if (nl == std::string_view::npos) {
      return;
    }
    line(partial_);
    partial_.clear();
    overlong_ = false;
    bytes.remove_prefix(nl + 1);
  }
}

void OrderParser::line(std::string_view text) {
  ++line_no_;
  if (!text.empty() && text.back() == '\r') {
    text.remove_suffix(1);
  }
  if (trim(text).empty()) {
    return;
  }
  if (ended_) {
    reject("after the #end line", text);
    return;
  }
  if (text.front() == '#') {
    if (text.size() <= kMaxLineBytes) {
      directive(text);
    }
    return;
  }
  ++entry_lines_;
  if (text.size() > kMaxLineBytes) {
    reject("line longer than 4096 bytes", text);
    return;
  }
  entry(text);
}

void OrderParser::directive(std::string_view text) {
  std::string_view rest = trim(text.substr(1));
  size_t k = 0;
  while (k < rest.size() && rest[k] >= 'a' && rest[k] <= 'z') {
    ++k;
  }
  const std::string_view keyword = rest.substr(0, k);
  std::string_view value = rest.substr(k);
  if (!value.empty() && !is_space(value.front()) && value.front() != ':' && value.front() != '=') {
    return;  // a comment such as "#epochs to come"
  }
  if (!value.empty() && (value.front() == ':' || value.front() == '=')) {
    value.remove_prefix(1);
  }
  value = trim(value);
  if (keyword == "end" && value.empty()) {
    ended_ = true;
    return;
  }
  if (keyword == "line") {
    // The next line is line N of the file the order came from: the lines a publisher wrote
    // ahead of it (epochfs publish's overrides, the Python client's header) do not shift the
    // numbers the rejects report.
    auto n = parse_u64(value);
    if (n && *n >= 1 && !entries_started()) {
      line_no_ = *n - 1;
    } else if (!entries_started()) {
      reject("bad #line directive (ignored)", text);
    }
    return;
  }
  if (keyword == "restart" && value.empty()) {
    if (!entries_started()) {
      header_.restart = true;
    }
    return;
  }
  const bool known = keyword == "form" || keyword == "epoch" || keyword == "stream" ||
                     keyword == "count" || keyword == "job" || keyword == "manifest";
  if (!known || entries_started()) {
    return;  // a comment, or a directive after the entries began: ignored
  }
  bool ok = true;
  bool duplicate = false;
  if (keyword == "form") {
    duplicate = header_.form.has_value();
    const bool paths = value == "paths" || value == "path";
    const bool indices = value == "indices" || value == "index";
    const bool ranges = value == "ranges" || value == "range";
    ok = paths || indices || ranges;
    if (ok && !duplicate) {
      header_.form = indices  ? OrderForm::kIndices
                     : ranges ? OrderForm::kRanges
                              : OrderForm::kPaths;
    }
  } else if (keyword == "epoch" || keyword == "count") {
    auto& field = keyword == "epoch" ? header_.epoch : header_.count;
    duplicate = field.has_value();
    auto v = parse_u64(value);
    ok = v.has_value();
    if (ok && !duplicate) {
      field = v;
    }
  } else {
    auto& field = keyword == "stream" ? header_.stream
                  : keyword == "job"  ? header_.job
                                      : header_.manifest;
    duplicate = field.has_value();
    ok = valid_stream_id(value);
    if (ok && !duplicate) {
      field = std::string(value);
    }
  }
  // A repeated directive is ignored without a report: the first one counts, which is how
  // `epochfs publish --epoch N` overrides a file's own #epoch.
  if (!ok && !duplicate) {
    reject("bad #" + std::string(keyword) + " directive (ignored)", text);
  }
}

void OrderParser::entry(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    reject("contains a NUL byte", text);
    return;
  }
  if (!valid_utf8(text)) {
    reject("not valid UTF-8", text);
    return;
  }
  if (form() == OrderForm::kIndices) {
    const std::string_view digits = trim(text);
    if (!parse_index(digits)) {
      reject("not an index", text);
      return;
    }
    sink_(digits, line_no_);
    return;
  }
  const char* why = "";
  if (form() == OrderForm::kRanges) {
    auto range = parse_range(text, &why);
    auto path = range ? normalise_range_path(range->path, &why) : std::nullopt;
    if (!path) {
      reject(why, text);
      return;
    }
    sink_(format_range(range->offset, range->length, *path), line_no_);
    return;
  }
  auto path = normalise_relative(text, &why);
  if (!path) {
    reject(why, text);
    return;
  }
  sink_(*path, line_no_);
}

void OrderParser::reject(std::string_view reason, std::string_view text) {
  rejects_->add(line_no_, reason, text);
}

cachestore::Status OrderParser::finish() {
  if (!partial_.empty()) {
    line(partial_);  // a last line without a newline
    partial_.clear();
    overlong_ = false;
  }
  if (header_.count && *header_.count != entry_lines_) {
    return cachestore::Status::error(EINVAL, "#count says " + std::to_string(*header_.count) +
                                                 " entries but the file has " +
                                                 std::to_string(entry_lines_) + " (cut short?)");
  }
  if (entry_lines_ == 0) {
    return cachestore::Status::error(EINVAL, "no entries");
  }
  return cachestore::Status::ok();
}

}  // namespace epochfs::prefetch
