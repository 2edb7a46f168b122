#include "tools/lab/read_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cachestore/unique_fd.h"

namespace epochfs::tools {

int64_t read_whole(const std::string& path, std::vector<char>& buf) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return -1;
  }
  int64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      return total;
    }
    total += n;
  }
}

bool drop_page_cache(bool keep_metadata) {
  ::sync();
  cachestore::UniqueFd fd(::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC));
  return fd.valid() && ::write(fd.get(), keep_metadata ? "1" : "3", 1) == 1;
}

ReadFigures read_files(const std::string& root, const std::vector<std::string>& paths,
                       unsigned threads) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> errors{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      // 1 MiB: a whole typical sample in one read() call, as a loader reading bytes would.
      std::vector<char> buf(1 << 20);
      // Relaxed: the counter only hands out distinct indices; join() orders the totals.
      for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < paths.size();
           i = next.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t n = read_whole(root + "/" + paths[i], buf);
        if (n < 0) {
          errors.fetch_add(1, std::memory_order_relaxed);
        } else {
          bytes.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  ReadFigures f;
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.files = paths.size() - errors.load();
  f.bytes = bytes.load();
  f.errors = errors.load();
  return f;
}

}  // namespace epochfs::tools
