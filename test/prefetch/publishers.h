// Publishers and order headers as the kernel and an upload would give them, for tests of the
// planner and its jobs.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

#include "prefetch/jobs.h"
#include "prefetch/order_parser.h"

namespace epochfs::prefetch {

// A publisher as the kernel would name one: this test process, a user and a session.
inline Publisher user(uid_t uid, pid_t sid = 100) {
  Publisher p;
  p.uid = uid;
  p.sid = sid;
  p.process = process_of(::getpid());
  p.leader = p.process;
  return p;
}

// A process that no longer runs: this process's pid with another start time.
inline Publisher exited(uid_t uid) {
  Publisher p = user(uid);
  p.process->start_ticks += 1;
  p.leader = p.process;
  return p;
}

inline OrderHeader header(std::optional<std::string> job, std::optional<std::string> stream,
                          std::optional<uint64_t> epoch = std::nullopt) {
  OrderHeader h;
  h.job = std::move(job);
  h.stream = std::move(stream);
  h.epoch = epoch;
  return h;
}

}  // namespace epochfs::prefetch
