#include "cachestore/proc_stat.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {
namespace {

TEST_CASE("a process's fields are read past a command name of spaces and parentheses",
          "[proc_stat]") {
  char saved[17] = {};
  REQUIRE(::prctl(PR_GET_NAME, saved) == 0);
  REQUIRE(::prctl(PR_SET_NAME, "a) b (c) 1 2") == 0);
  const auto st = ProcStat::of(::getpid());
  REQUIRE(::prctl(PR_SET_NAME, saved) == 0);
  REQUIRE(st);
  CHECK(st->field(ProcStat::kState) == "R");
  CHECK(st->number(4) == static_cast<uint64_t>(::getppid()));
  CHECK(st->number(ProcStat::kSession) == static_cast<uint64_t>(::getsid(0)));
  CHECK(st->number(ProcStat::kStartTime).has_value());
  CHECK_FALSE(st->exited());
  CHECK(st->field(1000).empty());
  CHECK_FALSE(st->number(1000));
  CHECK_FALSE(st->number(ProcStat::kState));  // a letter, not a number
}

TEST_CASE("a zombie has exited and a process gone is not found", "[proc_stat]") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::_exit(0);
  }
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  const auto zombie = ProcStat::of(child);
  REQUIRE(zombie);
  CHECK(zombie->exited());
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  CHECK_FALSE(ProcStat::of(child));
}

TEST_CASE("a number is all digits or none", "[proc_stat]") {
  CHECK(parse_u64("0") == 0U);
  CHECK(parse_u64("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parse_u64(""));
  CHECK_FALSE(parse_u64("12 "));
  CHECK_FALSE(parse_u64("-1"));
  CHECK_FALSE(parse_u64("18446744073709551616"));
}

}  // namespace
}  // namespace epochfs::cachestore
