#include "tools/lab/swarm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>
#include <thread>

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack: no malloc in a forked child
#include <xxhash.h>

namespace epochfs::tools {
namespace {

constexpr size_t kMaxProblems = 8;
constexpr size_t kProblemBytes = 512;
constexpr size_t kMaxProcesses = 1024;

// Shared by the parent and the readers (MAP_SHARED): the next file to take, each reader's last
// progress, and the counters.
struct Shared {
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> files{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> problems{0};
  std::atomic<int64_t> progress_ns[kMaxProcesses];
  char problem[kMaxProblems][kProblemBytes];
};

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void note_problem(Shared& s, const std::string& path, const char* what) {
  const uint64_t slot = s.problems.fetch_add(1);
  if (slot < kMaxProblems) {
    snprintf(s.problem[slot], kProblemBytes, "%s: %s", path.c_str(), what);
  }
}

// Reads path whole; its XXH64 and size, or false with errno set. No allocation: this runs in
// a child forked from a process that may have other threads.
bool digest_file(const char* path, uint64_t* digest, uint64_t* size) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  char buf[65536];
  *size = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return false;
    }
    if (n == 0) {
      break;
    }
    XXH64_update(&state, buf, static_cast<size_t>(n));
    *size += static_cast<uint64_t>(n);
  }
  ::close(fd);
  *digest = XXH64_digest(&state);
  return true;
}

[[noreturn]] void reader(const SwarmSpec& spec, Shared& s, unsigned me) {
  while (true) {
    const uint64_t i = s.next.fetch_add(1);
    if (i >= spec.paths.size()) {
      _exit(0);
    }
    uint64_t digest = 0;
    uint64_t size = 0;
    if (!digest_file(spec.paths[i].c_str(), &digest, &size)) {
      s.errors.fetch_add(1);
      note_problem(s, spec.paths[i], strerror(errno));
    } else if (digest != spec.digests[i]) {
      s.wrong.fetch_add(1);
      note_problem(s, spec.paths[i], "wrong bytes");
    } else {
      s.files.fetch_add(1);
      s.bytes.fetch_add(size);
    }
    s.progress_ns[me].store(monotonic_ns());
  }
}

}  // namespace

SwarmResult run_swarm(const SwarmSpec& spec) {
  SwarmResult result;
  const unsigned n = std::min<unsigned>(spec.processes, kMaxProcesses);
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    result.problems.push_back(std::string("mmap: ") + strerror(errno));
    return result;
  }
  auto* s = new (mem) Shared;
  const int64_t start = monotonic_ns();
  std::vector<pid_t> pids;
  for (unsigned p = 0; p < n; ++p) {
    s->progress_ns[p].store(start);
    const pid_t pid = fork();
    if (pid == 0) {
      reader(spec, *s, p);
    }
    if (pid > 0) {
      pids.push_back(pid);
    }
  }
  const int64_t limit_ns = std::chrono::nanoseconds(spec.stall_limit).count();
  std::vector<bool> done(pids.size(), false);
  size_t running = pids.size();
  // A reader killed inside a FUSE request the daemon never answers cannot die until the
  // request ends: after a stall, wait this long for the readers, then give up on them.
  int64_t give_up_ns = INT64_MAX;
  while (running > 0 && monotonic_ns() < give_up_ns) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int64_t now = monotonic_ns();
    for (size_t p = 0; p < pids.size(); ++p) {
      if (done[p]) {
        continue;
      }
      if (waitpid(pids[p], nullptr, WNOHANG) == pids[p]) {
        done[p] = true;
        --running;
        continue;
      }
      const double waited = static_cast<double>(now - s->progress_ns[p].load()) / 1e9;
      result.longest_wait_s = std::max(result.longest_wait_s, waited);
      if (now - s->progress_ns[p].load() > limit_ns && !result.stalled) {
        result.stalled = true;
        give_up_ns = now + limit_ns;
        for (size_t q = 0; q < pids.size(); ++q) {
          if (!done[q]) {
            kill(pids[q], SIGKILL);
          }
        }
      }
    }
  }
  if (running > 0) {
    result.problems.push_back(std::to_string(running) +
                              " reader(s) still stuck after SIGKILL (in a FUSE request)");
  }
  result.files = s->files.load();
  result.bytes = s->bytes.load();
  result.wrong = s->wrong.load();
  result.errors = s->errors.load();
  const uint64_t problems = std::min<uint64_t>(s->problems.load(), kMaxProblems);
  for (uint64_t i = 0; i < problems; ++i) {
    result.problems.emplace_back(s->problem[i]);
  }
  s->~Shared();
  munmap(mem, sizeof(Shared));
  return result;
}

}  // namespace epochfs::tools
