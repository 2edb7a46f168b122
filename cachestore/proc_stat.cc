#include "cachestore/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>

#include "cachestore/unique_fd.h"

namespace epochfs::cachestore {

std::optional<ProcStat> ProcStat::of(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  // The whole line: a pid, a command of 16 bytes at most and 50 fields of 20 digits at most.
  char buf[1200];
  const ssize_t n = fd.valid() ? ::read(fd.get(), buf, sizeof(buf)) : -1;
  if (n <= 0) {
    return std::nullopt;
  }
  std::string text(buf, static_cast<size_t>(n));
  // The command name (field 2) may hold spaces and parentheses: fields are counted from its
  // last closing parenthesis.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return std::nullopt;
  }
  return ProcStat(std::move(text), close + 1);
}

std::string_view ProcStat::field(int n) const {
  std::string_view rest(text_);
  rest.remove_prefix(fields_);
  for (int f = 3;; ++f) {
    const size_t begin = rest.find_first_not_of(" \n");
    if (begin == std::string_view::npos) {
      return {};
    }
    rest.remove_prefix(begin);
    const size_t end = std::min(rest.find_first_of(" \n"), rest.size());
    if (f == n) {
      return rest.substr(0, end);
    }
    rest.remove_prefix(end);
  }
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    return std::nullopt;
  }
  return v;
}

std::optional<uint64_t> ProcStat::number(int n) const { return parse_u64(field(n)); }

bool ProcStat::exited() const {
  const std::string_view state = field(kState);
  return state == "Z" || state == "X";
}

}  // namespace epochfs::cachestore
