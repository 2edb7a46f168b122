#include "prefetch/source_guard.h"

#include <errno.h>

#include <algorithm>
#include <deque>
#include <new>
#include <system_error>
#include <unordered_set>

#include "cachestore/log.h"

namespace epochfs::prefetch {

using cachestore::LogLevel;
using cachestore::MutexLock;
using cachestore::now_ns;
using cachestore::Status;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
// A waiting caller looks at its Cancel at least this often (a wake may be missed only by a
// Cancel set between its check and its wait).
constexpr auto kCancelPoll = std::chrono::milliseconds(100);

bool cancelled_now() { return Cancel::current_cancelled(); }

int64_t seconds_to_ns(double s) { return static_cast<int64_t>(s * 1e9); }

}  // namespace

bool is_outage_error(int err) {
  switch (err) {
    case ENOTCONN:  // a FUSE source whose daemon died; a dead NFS transport
    case ETIMEDOUT:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENETDOWN:
    case ENETUNREACH:
    case ENETRESET:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ESHUTDOWN:
    case ENOLINK:
    case ECOMM:
      return true;
    default:
      return false;
  }
}

bool answer_instead(int err) { return err == EIO || is_outage_error(err); }

// One call handed to a calling thread.
struct SourceGuard::Job {
  Work work;
  // Its caller waits on it (on Shared::mu): one wake per call ended, not one for every waiter.
  std::optional<cachestore::CondVar> done_cv;
  // Under Shared::mu.
  bool started = false;
  bool done = false;
  bool abandoned = false;  // its caller left: skip it if it has not started
  Status result;
  std::shared_ptr<void> payload;  // what work put out, this attempt's own
};

// What the calling threads share with the guard. Owned jointly, so that a thread stuck in a
// hung source may outlive the guard (it is detached then) and still finish safely.
struct SourceGuard::Shared {
  cachestore::Mutex mu;
  cachestore::CondVar work_cv{&mu};  // a job was queued, or stopping
  cachestore::CondVar changed{&mu};  // the state changed, or a Cancel was set
  std::deque<std::shared_ptr<Job>> queue GUARDED_BY(mu);
  std::unordered_set<Job*> waited_for GUARDED_BY(mu);  // jobs whose callers wait on done_cv
  bool stopping GUARDED_BY(mu) = false;
  unsigned idle GUARDED_BY(mu) = 0;
  std::vector<std::thread> threads GUARDED_BY(mu);
  std::vector<std::shared_ptr<std::atomic<bool>>> busy GUARDED_BY(mu);  // one per thread

  void serve(std::atomic<bool>* busy_flag);
  // Starts one more calling thread if none is idle (self: this, shared with the thread); false
  // if none could be started and none runs at all.
  bool add_thread_if_needed(const std::shared_ptr<Shared>& self, const SourceGuardOptions& options)
      REQUIRES(mu);
};

void SourceGuard::Shared::serve(std::atomic<bool>* busy_flag) {
  cachestore::name_this_thread("epochfs-guard");
  for (;;) {
    std::shared_ptr<Job> job;
    {
      MutexLock lock(mu);
      while (!stopping && queue.empty()) {
        work_cv.wait();
      }
      if (stopping) {
        return;
      }
      job = std::move(queue.front());
      queue.pop_front();
      if (job->abandoned) {
        continue;
      }
      --idle;
      job->started = true;
      busy_flag->store(true);
    }
    Status result;
    std::shared_ptr<void> payload;
    try {
      result = job->work(&payload);
    } catch (const std::bad_alloc&) {
      result = Status::error(ENOMEM, "a call into the source");
    }
    MutexLock lock(mu);
    busy_flag->store(false);
    ++idle;
    job->done = true;
    job->result = std::move(result);
    job->payload = std::move(payload);
    if (job->done_cv) {
      job->done_cv->notify_one();
    }
  }
}

SourceGuard::SourceGuard(const cachestore::RootDir& source, SourceGuardOptions options)
    : source_(source), options_(options) {}

SourceGuard::~SourceGuard() {
  if (!shared_) {
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<std::atomic<bool>>> busy;
  {
    MutexLock lock(shared_->mu);
    shared_->stopping = true;
    shared_->work_cv.notify_all();
    shared_->changed.notify_all();
    threads.swap(shared_->threads);
    busy = shared_->busy;
  }
  prober_.join();
  for (size_t i = 0; i < threads.size(); ++i) {
    // A thread in a call may be stuck in a hung source for good: it owns what it touches.
    if (busy[i]->load()) {
      threads[i].detach();
    } else {
      threads[i].join();
    }
  }
}

void SourceGuard::start(OnRecovery on_recovery) {
  if (shared_) {
    return;
  }
  on_recovery_ = std::move(on_recovery);
  shared_ = std::make_shared<Shared>();
  prober_ = std::thread([this] { probe_loop(); });
}

Status SourceGuard::run(const std::string& path, bool has_answer, const Work& work,
                        std::shared_ptr<void>* result_out) {
  const int64_t deadline = now_ns() + seconds_to_ns(options_.outage_wait_s);
  bool waited = false;
  for (;;) {
    // The source down, or only this path's part of it (hung while the rest answers).
    const bool part = hung(path);
    if (part || down()) {
      if (has_answer) {
        return Status::error(
            ETIMEDOUT, (part ? "this part of the source hangs: " : "the source is down: ") + path);
      }
      waited = true;
      if (!wait_until_clear(path, deadline)) {
        if (cancelled_now()) {
          interrupted_.fetch_add(1, kRelaxed);
          return Status::error(EINTR, path);
        }
        failed_.fetch_add(1, kRelaxed);
        return Status::error(EIO, "the source did not come back within --outage-wait: " + path);
      }
      continue;
    }
    auto job = std::make_shared<Job>();
    job->work = work;
    bool cancelled = false;
    std::shared_ptr<void> payload;
    auto result = attempt(job, &cancelled, &payload);
    if (cancelled) {
      interrupted_.fetch_add(1, kRelaxed);
      return Status::error(EINTR, path);
    }
    if (!result) {
      timed_out_.fetch_add(1, kRelaxed);
      char why[96];
      snprintf(why, sizeof why, "no answer within %g s", options_.timeout_s);
      mark_hung(path, job);
      mark_down(why, path);
      continue;
    }
    if (is_outage_error(result->error_code())) {
      mark_down(result->to_string(), path);
      if (has_answer) {
        return *result;
      }
      continue;
    }
    if (waited) {
      waited_.fetch_add(1, kRelaxed);
    }
    *result_out = std::move(payload);
    return *result;
  }
}

bool SourceGuard::Shared::add_thread_if_needed(const std::shared_ptr<Shared>& self,
                                               const SourceGuardOptions& options) {
  if (idle >= queue.size() || threads.size() >= options.threads) {
    return true;
  }
  try {
    auto busy_flag = std::make_shared<std::atomic<bool>>(false);
    std::function<void()> body = [self, busy_flag] { self->serve(busy_flag.get()); };
    // Room first: once the thread runs, nothing may throw (a joinable thread destroyed ends
    // the process).
    busy.reserve(busy.size() + 1);
    threads.reserve(threads.size() + 1);
    std::thread thread =
        options.start_thread ? options.start_thread(std::move(body)) : std::thread(body);
    busy.push_back(std::move(busy_flag));
    threads.push_back(std::move(thread));
    ++idle;
  } catch (const std::system_error& e) {
    cachestore::log(LogLevel::kWarning, "cannot start a thread to call the source: %s", e.what());
  } catch (const std::bad_alloc&) {
    cachestore::log(LogLevel::kWarning, "cannot start a thread to call the source: no memory");
  }
  return !threads.empty();
}

std::optional<Status> SourceGuard::attempt(const std::shared_ptr<Job>& job, bool* cancelled,
                                           std::shared_ptr<void>* result) {
  if (!shared_ || options_.direct) {
    // Not started (no fork yet, or a test without threads), or local: on this thread.
    return job->work(result);
  }
  const int64_t start = now_ns();
  const int64_t deadline = start + seconds_to_ns(options_.timeout_s);
  MutexLock lock(shared_->mu);
  job->done_cv.emplace(&shared_->mu);
  shared_->queue.push_back(job);
  if (!shared_->add_thread_if_needed(shared_, options_)) {
    shared_->queue.pop_back();
    return Status::error(EIO, "no thread could be started to call the source");
  }
  shared_->work_cv.notify_one();
  shared_->waited_for.insert(job.get());
  while (!job->done) {
    const int64_t now = now_ns();
    if (cancelled_now() || now >= deadline) {
      *cancelled = cancelled_now();
      job->abandoned = true;
      shared_->waited_for.erase(job.get());
      return std::nullopt;
    }
    job->done_cv->wait_for(
        std::min<std::chrono::nanoseconds>(kCancelPoll, std::chrono::nanoseconds(deadline - now)));
  }
  shared_->waited_for.erase(job.get());
  note_duration(now_ns() - start);
  *result = std::move(job->payload);
  return job->result;
}

bool SourceGuard::wait_until_clear(const std::string& path, int64_t deadline_ns) {
  if (!shared_) {
    return false;
  }
  MutexLock lock(shared_->mu);
  while ((hung(path) || down()) && !shared_->stopping) {
    const int64_t now = now_ns();
    if (cancelled_now() || now >= deadline_ns || stop_waiting_.load()) {
      return false;
    }
    shared_->changed.wait_for(std::min<std::chrono::nanoseconds>(
        kCancelPoll, std::chrono::nanoseconds(deadline_ns - now)));
  }
  return !hung(path) && !down();
}

bool SourceGuard::hung(const std::string& path) const {
  if (hung_count_.load(std::memory_order_acquire) == 0) {
    return false;  // the usual case: no lock
  }
  MutexLock lock(mu_);
  for (const HungPath& hung_path : hung_) {
    const std::string& h = hung_path.path;
    if (path == h ||
        (path.size() > h.size() && path.compare(0, h.size(), h) == 0 && path[h.size()] == '/')) {
      return true;
    }
  }
  return false;
}

void SourceGuard::mark_hung(const std::string& path, const std::shared_ptr<Job>& stuck) {
  if (path.empty()) {
    return;  // the root: the source as a whole, which the prober's statfs asks
  }
  MutexLock lock(mu_);
  if (hung_.size() >= kMaxHungPaths) {
    unrecorded_.push_back(stuck);  // no room: the source is down as a whole
    return;
  }
  for (const HungPath& h : hung_) {
    if (h.path == path) {
      return;  // a call made before the first was recorded; the first returning clears it
    }
  }
  hung_.push_back({path, stuck});
  hung_count_.store(hung_.size(), std::memory_order_release);
}

bool SourceGuard::clear_returned() {
  std::vector<std::string> cleared;
  bool whole_up;
  {
    MutexLock shared_lock(shared_->mu);  // the jobs' state
    MutexLock lock(mu_);
    // A call abandoned while still queued never starts: it was never in the source.
    const auto returned = [](const std::shared_ptr<Job>& job) {
      return job->done || !job->started;
    };
    for (auto it = hung_.begin(); it != hung_.end();) {
      if (returned(it->stuck)) {
        cleared.push_back(std::move(it->path));
        it = hung_.erase(it);
      } else {
        ++it;
      }
    }
    hung_count_.store(hung_.size(), std::memory_order_release);
    std::erase_if(unrecorded_, returned);
    if (!cleared.empty()) {
      unrecorded_.clear();  // room again: a call that hangs again is recorded
    }
    whole_up = unrecorded_.empty();
  }
  for (const std::string& path : cleared) {
    cachestore::log(LogLevel::kInfo, "the source answers for %s again", path.c_str());
  }
  if (!cleared.empty()) {
    wake();
  }
  return whole_up;
}

void SourceGuard::stop_waiting() {
  stop_waiting_.store(true);
  wake();
}

void SourceGuard::wake() {
  if (shared_) {
    MutexLock lock(shared_->mu);
    shared_->changed.notify_all();
    for (Job* job : shared_->waited_for) {
      job->done_cv->notify_all();
    }
  }
}

bool SourceGuard::probe(std::shared_ptr<Job>& job) {
  {
    MutexLock lock(shared_->mu);
    if (job && job->started && !job->done) {
      return false;  // the last probe is still stuck in the source
    }
  }
  job = std::make_shared<Job>();
  job->work = [this](std::shared_ptr<void>* /*out*/) {
    // statfs of the root reaches the servers (no client answers it from a cache).
    auto ask = [&] { return source_.statfs().status(); };
    Status st = ask();
    // A dead connection: the source may have been mounted again where it was.
    if (st.error_code() == ENOTCONN && source_.reopen()) {
      cachestore::log(LogLevel::kInfo, "the source's root was opened again by its path (%s)",
                      source_.path().c_str());
      st = ask();
    }
    return st;
  };
  bool cancelled = false;
  std::shared_ptr<void> unused;
  auto result = attempt(job, &cancelled, &unused);
  return result && !is_outage_error(result->error_code());
}

void SourceGuard::probe_loop() {
  cachestore::name_this_thread("epochfs-probe");
  std::shared_ptr<Job> root_probe;
  for (;;) {
    {
      // A state change wakes `changed` too: sleep the whole period regardless.
      const int64_t next = now_ns() + std::chrono::nanoseconds(kProbePeriod).count();
      MutexLock lock(shared_->mu);
      for (int64_t now = now_ns(); now < next && !shared_->stopping; now = now_ns()) {
        shared_->changed.wait_for(std::chrono::nanoseconds(next - now));
      }
      if (shared_->stopping) {
        return;
      }
    }
    if (clear_returned() && down() && probe(root_probe)) {
      mark_up();
    }
  }
}

}  // namespace epochfs::prefetch
