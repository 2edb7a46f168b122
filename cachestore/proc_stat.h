// One reader of /proc/PID/stat (proc(5)) for every module: whether a process runs, when it
// started, its session, its CPU time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace epochfs::cachestore {

// s as a decimal number, all of it; nullopt if it is not one (or is empty).
std::optional<uint64_t> parse_u64(std::string_view s);

class ProcStat {
 public:
  // Fields numbered as in proc(5).
  static constexpr int kState = 3;
  static constexpr int kSession = 6;
  static constexpr int kUserTime = 14;    // clock ticks
  static constexpr int kSystemTime = 15;  // clock ticks
  static constexpr int kStartTime = 22;   // clock ticks after boot

  // pid's line, read once; nullopt if pid is not in /proc (gone, or hidden from us).
  static std::optional<ProcStat> of(pid_t pid);

  // Field n (3 or more); empty if the line has none.
  std::string_view field(int n) const;
  std::optional<uint64_t> number(int n) const;
  // It has exited: a zombie its parent has not reaped runs no more.
  bool exited() const;

 private:
  explicit ProcStat(std::string text, size_t fields) : text_(std::move(text)), fields_(fields) {}

  std::string text_;
  size_t fields_;  // where field 3 starts
};

}  // namespace epochfs::cachestore
