// Planner: the thread that hands the stager the files ahead of each stream's position, one per
// stream in turn within the free slots; the streams' positions from opens; their epoch
// records and rates. Publishes and jobs are in planner_publish.cc.
#include "prefetch/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <thread>

#include "cachestore/log.h"

namespace epochfs::prefetch {

using cachestore::LogLevel;
using cachestore::MutexLock;
using cachestore::now_ns;

namespace {

constexpr int64_t kRateWindowNs = 1'000'000'000;
constexpr auto kIdlePoll = std::chrono::milliseconds(50);
// Passes start at most this often. Every open marks the plan dirty, and thousands come a
// second: a pass per open woke this thread per open (a context switch each, on the cores the
// trainer needs), while a window of hundreds of files does not need a pass a millisecond.
constexpr auto kMinPassInterval = std::chrono::milliseconds(1);
// Log lines for entries found unusable while staging, per mount; the rest are only counted.
constexpr uint64_t kRejectLogLines = 5;

}  // namespace

void add_record(EpochRecord& to, const EpochRecord& from) {
  to.opens += from.opens;
  to.hits += from.hits;
  to.misses += from.misses;
  to.waits += from.waits;
  to.stall_ns += from.stall_ns;
  to.bytes_from_source += from.bytes_from_source;
  to.copies_started += from.copies_started;
  to.seconds += from.seconds;
}

Planner::Planner(PlannerOptions options)
    : options_(options), schedule_(options.reorder_window), jobs_(options.limits) {}

Planner::~Planner() { stop(); }

void Planner::start(PrefetchSink* sink) {
  if (thread_.joinable()) {
    return;
  }
  sink_ = sink;
  thread_ = std::thread([this] { run(); });
}

void Planner::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Planner::run() {
  cachestore::name_this_thread("epochfs-plan");
  while (true) {
    {
      MutexLock lock(mu_);
      passing_ = false;  // the last pass is over (its copies are queued)
      if (!dirty_ && !stopping_) {
        wake_.wait_for(kIdlePoll);
      }
      if (stopping_) {
        return;
      }
      passing_ = dirty_;
      dirty_ = false;
    }
    const auto started = std::chrono::steady_clock::now();
    try {
      end_finished_jobs();
      plan_pass();
      sink_->reclaim();  // no pass is under way: no id picked is still on its way to a copy
    } catch (const std::bad_alloc&) {
      // Out of memory: skip this pass; the reads themselves never depend on prefetch.
      cachestore::log(LogLevel::kError, "planner: out of memory; prefetch paused for a pass");
    }
    std::this_thread::sleep_until(started + kMinPassInterval);
  }
}

void Planner::plan_pass() {
  // One pass: hand the sink up to its free slots, taking one file per stream in turn.
  unsigned budget = sink_->prefetch_slots();
  while (budget > 0) {
    std::vector<std::pair<FileId, size_t>> picks;
    {
      MutexLock lock(mu_);
      for (bool found = true; found && picks.size() < budget;) {
        found = false;
        for (size_t s = 0; s < schedule_.stream_count() && picks.size() < budget; ++s) {
          if (!schedule_.stream_live(s)) {
            continue;
          }
          const uint64_t window = window_for(s);
          if (window == 0) {
            continue;
          }
          if (auto id = schedule_.next_to_stage(s, window)) {
            picks.emplace_back(*id, s);
            found = true;
          }
        }
      }
    }
    if (picks.empty()) {
      break;
    }
    for (const auto& [id, stream] : picks) {
      if (sink_->prefetch(id, stream)) {
        --budget;
        count_copy_started(stream);
      }
    }
  }
}

WindowInputs Planner::window_inputs(size_t stream) const {
  WindowInputs in;
  in.stage_threads = options_.stage_threads;
  in.cache_capacity = options_.cache_capacity;
  in.rate_files_s = stream < rates_.size() ? rates_[stream].per_s : 0;
  if (copies_measured_ > 0) {
    in.copy_latency_s = copy_latency_s_;
    in.mean_file_bytes = mean_file_bytes_;
  }
  return in;
}

uint64_t Planner::window_for(size_t stream) const {
  return window_files(options_.lookahead, window_inputs(stream));
}

void Planner::note_rejects(size_t stream, const RejectReport& rejects) {
  streams_[stream].rejected_entries += rejects.total;
}

void Planner::finish_epoch(size_t stream, int64_t now) {
  uncounted_[stream] = 0;  // late counts of the epoch ended go to the next one's record
  StreamStats& st = streams_[stream];
  EpochRecord& cur = st.current;
  if (cur.opens > 0) {
    cur.seconds = static_cast<double>(now - epoch_started_ns_[stream]) / 1e9;
    add_record(st.total, cur);
    st.history.push_back(cur);
    if (st.history.size() > kHistory) {
      st.history.erase(st.history.begin());
    }
  }
  const auto view = schedule_.view(stream);
  cur = EpochRecord{};
  cur.epoch = view.epoch;
  cur.length = view.epoch_length;
  epoch_started_ns_[stream] = now;
}

std::optional<size_t> Planner::on_open(FileId id, std::optional<uid_t> opener) {
  MutexLock lock(mu_);
  return matched(schedule_.on_open(id, opener));
}

std::optional<size_t> Planner::on_block_read(FileId id, uint64_t bytes, bool fresh,
                                             std::optional<uid_t> opener) {
  MutexLock lock(mu_);
  return matched(schedule_.on_block_read(id, bytes, fresh, opener));
}

// What an open or a block's read matched: its stream's activity, epoch record and rate.
std::optional<size_t> Planner::matched(std::optional<Schedule::Match> match) {
  if (!match) {
    ++unscheduled_opens_;
    return std::nullopt;
  }
  const size_t s = match->stream;
  const int64_t now = now_ns();
  if (stream_job_[s] != nullptr) {
    stream_job_[s]->last_active_ns = now;
  }
  if (!match->consumed) {
    return s;  // a block's read that used up no entry: no progress, not in the rate
  }
  if (finish_after_count_[s]) {
    finish_after_count_[s] = false;  // the count of the open that ended it never came
    finish_epoch(s, now);
  }
  // An open of the next epoch's first entries belongs to it, and so does any open once the
  // record is of an epoch the stream has left: the record ends now. An open that used up its
  // epoch belongs to that epoch: the record ends once the open is counted.
  const auto view = schedule_.view(s);
  if (match->ended_epoch) {
    finish_after_count_[s] = view.active;
  } else if (view.active && (match->new_epoch || view.epoch != streams_[s].current.epoch)) {
    finish_epoch(s, now);
  }
  ++uncounted_[s];
  Rate& r = rates_[s];
  if (now - r.window_start_ns >= kRateWindowNs) {
    const double elapsed = static_cast<double>(now - r.window_start_ns) / 1e9;
    const double measured =
        r.window_start_ns == 0 ? 0 : static_cast<double>(r.window_count) / elapsed;
    r.per_s = r.per_s == 0 ? measured : 0.5 * r.per_s + 0.5 * measured;
    r.window_start_ns = now;
    r.window_count = 0;
  }
  ++r.window_count;
  dirty_ = true;
  wake_.notify_one();
  return s;
}

void Planner::count_open(size_t stream, const OpenOutcome& outcome) {
  MutexLock lock(mu_);
  if (stream >= streams_.size()) {
    return;
  }
  EpochRecord& cur = streams_[stream].current;
  ++cur.opens;
  outcome.hit ? ++cur.hits : ++cur.misses;
  if (outcome.waited) {
    ++cur.waits;
  }
  cur.stall_ns += outcome.stall_ns;
  // Concurrent opens are counted in any order: the epoch ends with the last of its counts.
  uncounted_[stream] -= uncounted_[stream] > 0 ? 1 : 0;
  if (finish_after_count_[stream] && uncounted_[stream] == 0) {
    finish_after_count_[stream] = false;
    finish_epoch(stream, now_ns());
  }
}

void Planner::count_source_bytes(size_t stream, uint64_t bytes) {
  MutexLock lock(mu_);
  if (stream < streams_.size()) {  // a stream of an ended job may be gone
    streams_[stream].current.bytes_from_source += bytes;
  }
}

void Planner::count_copy_started(size_t stream) {
  MutexLock lock(mu_);
  if (stream < streams_.size()) {
    ++streams_[stream].current.copies_started;
  }
}

void Planner::copy_finished(int64_t latency_ns, uint64_t bytes) {
  MutexLock lock(mu_);
  const double latency = static_cast<double>(latency_ns) / 1e9;
  if (copies_measured_ == 0) {
    copy_latency_s_ = latency;
    mean_file_bytes_ = static_cast<double>(bytes);
  } else {
    // Exponential averages over roughly the last hundred copies.
    copy_latency_s_ += 0.01 * (latency - copy_latency_s_);
    mean_file_bytes_ += 0.01 * (static_cast<double>(bytes) - mean_file_bytes_);
  }
  ++copies_measured_;
  dirty_ = true;
  wake_.notify_one();
}

void Planner::slot_freed() {
  MutexLock lock(mu_);
  dirty_ = true;
  wake_.notify_one();
}

void Planner::replan() {
  MutexLock lock(mu_);
  schedule_.replan();
  dirty_ = true;
  wake_.notify_one();
}

void Planner::reject_entry(size_t stream, const std::string& path, const std::string& why) {
  uint64_t n;
  {
    MutexLock lock(mu_);
    if (stream >= streams_.size()) {
      return;
    }
    n = ++streams_[stream].rejected_entries;
  }
  if (n <= kRejectLogLines) {
    cachestore::log(LogLevel::kWarning, "order entry %s skipped: %s", escape_for_log(path).c_str(),
                    why.c_str());
  }
}

std::shared_ptr<const Credentials> Planner::reader_of(size_t stream) const {
  MutexLock lock(mu_);
  if (stream >= stream_job_.size() || stream_job_[stream] == nullptr) {
    return nullptr;
  }
  return stream_job_[stream]->reader;
}

uint64_t Planner::next_use(FileId id) {
  MutexLock lock(mu_);
  return schedule_.next_use(id);
}

bool Planner::this_epoch_only(FileId id) {
  MutexLock lock(mu_);
  return schedule_.this_epoch_only(id);
}

bool Planner::repeats(FileId id) {
  MutexLock lock(mu_);
  return schedule_.repeats(id);
}

PlannerStats Planner::stats() const {
  MutexLock lock(mu_);
  PlannerStats out;
  out.planning = dirty_ || passing_;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (!schedule_.stream_live(s)) {
      continue;
    }
    StreamStats& st = out.streams.emplace_back(streams_[s]);
    st.view = schedule_.view(s);
    const WindowInputs in = window_inputs(s);
    st.window_files = window_files(options_.lookahead, in);
    st.rate_files_s = rates_[s].per_s;
    st.lead_s =
        st.rate_files_s > 0 ? static_cast<double>(st.view.planned_ahead) / st.rate_files_s : 0;
    const double dataset = static_cast<double>(st.view.epoch_length) * mean_file_bytes(in);
    st.hit_rate_bound = options_.cache_capacity == UINT64_MAX || dataset == 0
                            ? 1.0
                            : std::min(1.0, static_cast<double>(options_.cache_capacity) / dataset);
    add_record(st.total, st.current);
  }
  out.publishes = publishes_;
  out.publish_failures = publish_failures_;
  out.last_publish = last_publish_;
  out.last_publish_by_user = last_publish_by_user_;
  for (const auto& [key, job] : jobs_.all()) {
    for (const auto& [name, m] : job.manifests) {
      out.manifest_entries += m->entries();
    }
  }
  out.jobs = jobs_.all().size();
  out.jobs_ended = jobs_ended_;
  out.publishes_over_limit = publishes_over_limit_;
  out.schedule_entries = schedule_.entries_held();
  out.schedule_bytes = schedule_.memory_bytes();
  out.unscheduled_opens = unscheduled_opens_;
  out.copy_latency_s = copies_measured_ > 0 ? copy_latency_s_ : 0;
  return out;
}

}  // namespace epochfs::prefetch
