#include "tools/lab/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"
#include "tools/lab/read_bench.h"

namespace epochfs::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Batches read by the loader threads, handed to the training loop in order.
class BatchQueue {
 public:
  BatchQueue(size_t batches, size_t ahead) : ready_(batches, false), ahead_(ahead) {}

  // The next batch for a loader to read, once it is within `ahead` of the loop; false at the end.
  bool take(size_t* batch) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return next_ >= ready_.size() || next_ < consumed_ + ahead_; });
    if (next_ >= ready_.size()) {
      return false;
    }
    *batch = next_++;
    return true;
  }

  void done(size_t batch) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_[batch] = true;
    cv_.notify_all();
  }

  // Waits for the batch the loop needs next; returns the seconds waited.
  double consume(size_t batch) {
    const auto start = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_[batch]; });
    consumed_ = batch + 1;
    cv_.notify_all();
    return seconds_since(start);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> ready_;
  size_t next_ = 0;
  size_t consumed_ = 0;
  const size_t ahead_;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

std::vector<uint32_t> epoch_order(size_t files, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> order(files);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed * 1000003 + epoch));
  return order;
}

EpochFigures run_epoch(const std::string& root, const std::vector<std::string>& paths,
                       const std::vector<uint32_t>& order, const TrainerSpec& spec) {
  const size_t batches = (order.size() + spec.batch - 1) / spec.batch;
  BatchQueue queue(batches, static_cast<size_t>(spec.workers) * spec.prefetch_factor);
  std::atomic<uint64_t> bytes{0}, errors{0};
  const auto start = Clock::now();
  std::vector<std::thread> loaders;
  for (unsigned w = 0; w < spec.workers; ++w) {
    loaders.emplace_back([&] {
      std::vector<char> buf(1 << 20);
      size_t b;
      while (queue.take(&b)) {
        const size_t end = std::min(order.size(), (b + 1) * spec.batch);
        for (size_t i = b * spec.batch; i < end; ++i) {
          const int64_t n = read_whole(root + "/" + paths[order[i]], buf);
          n < 0 ? ++errors : bytes += static_cast<uint64_t>(n);
        }
        queue.done(b);
      }
    });
  }
  std::vector<double> waits;
  const auto compute = std::chrono::duration<double, std::milli>(spec.compute_ms);
  for (size_t b = 0; b < batches; ++b) {
    waits.push_back(queue.consume(b));
    std::this_thread::sleep_for(compute);
  }
  for (auto& t : loaders) {
    t.join();
  }
  EpochFigures f;
  f.samples = order.size();
  f.bytes = bytes.load();
  f.errors = errors.load();
  f.seconds = seconds_since(start);
  f.stall_s = std::accumulate(waits.begin(), waits.end(), 0.0);
  f.p50_wait_ms = percentile(waits, 0.5) * 1e3;
  f.p99_wait_ms = percentile(waits, 0.99) * 1e3;
  return f;
}

bool publish_order(const std::string& mnt, const std::vector<std::string>& paths,
                   const std::vector<uint32_t>& order, size_t epoch) {
  std::string text =
      "#epoch " + std::to_string(epoch) + "\n#count " + std::to_string(order.size()) + "\n";
  for (uint32_t i : order) {
    text += paths[i] + "\n";
  }
  const std::string path = mnt + "/.epochfs/order-" + std::to_string(epoch);
  cachestore::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  const bool ok = fd.valid() && cachestore::write_all(fd.get(), text, path).is_ok() &&
                  ::close(fd.release()) == 0;
  if (!ok) {
    fprintf(stderr, "epochfs-lab: publishing epoch %zu: %s\n", epoch, strerror(errno));
  }
  return ok;
}

}  // namespace epochfs::tools
