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

constexpr char kDefaultStream[] = "default";
constexpr char kDefaultManifest[] = "default";
constexpr int64_t kJobSweepNs = 1'000'000'000;
constexpr int64_t kRateWindowNs = 1'000'000'000;
constexpr auto kIdlePoll = std::chrono::milliseconds(50);
// Passes start at most this often. Every open marks the plan dirty, and thousands come a
// second: a pass per open woke this thread per open (a context switch each, on the cores the
// trainer needs), while a window of hundreds of files does not need a pass a millisecond.
constexpr auto kMinPassInterval = std::chrono::milliseconds(1);
// Before anything was measured: a network file system's copy of a small file.
constexpr double kInitialCopyLatencyS = 0.005;
constexpr double kInitialFileBytes = 128 * 1024;
// Log lines for entries found unusable while staging, per mount; the rest are only counted.
constexpr uint64_t kRejectLogLines = 5;

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

}  // namespace

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
    } catch (const std::bad_alloc&) {
      // Out of memory: skip this pass; the reads themselves never depend on prefetch.
      cachestore::log(LogLevel::kError, "planner: out of memory; prefetch paused for a pass");
    }
    {
      MutexLock lock(mu_);
      passing_ = false;
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

uint64_t Planner::window_for(size_t stream) const {
  const uint64_t threads = options_.stage_threads;
  // Empty files measured so far must not make the mean 0 (a division below).
  const double mean_bytes =
      copies_measured_ > 0 ? std::max(1.0, mean_file_bytes_) : kInitialFileBytes;
  uint64_t files = 0;
  switch (options_.lookahead.kind) {
    case Lookahead::Kind::kFiles:
      if (options_.lookahead.amount == 0) {
        return 0;  // no prefetch: the known future only decides eviction and admission
      }
      files = options_.lookahead.amount;
      break;
    case Lookahead::Kind::kBytes:
      files = static_cast<uint64_t>(static_cast<double>(options_.lookahead.amount) / mean_bytes);
      break;
    case Lookahead::Kind::kAuto: {
      const double rate = stream < rates_.size() ? rates_[stream].per_s : 0;
      const double latency = copies_measured_ > 0 ? copy_latency_s_ : kInitialCopyLatencyS;
      files = std::max<uint64_t>(2 * threads,
                                 static_cast<uint64_t>(std::ceil(2 * rate * latency)) + threads);
      break;
    }
  }
  // Never plan more than half the cache ahead: the rest holds what is kept for later.
  if (options_.cache_capacity != UINT64_MAX) {
    files = std::min<uint64_t>(
        files,
        static_cast<uint64_t>(static_cast<double>(options_.cache_capacity) / 2 / mean_bytes));
  }
  return std::max<uint64_t>(1, files);
}

PublishReport Planner::record(PublishReport report) {
  ++publishes_;
  if (!report.ok) {
    ++publish_failures_;
  }
  last_publish_ = report;
  return report;
}

Job* Planner::job_of(const Publisher& publisher, const OrderHeader& header, PublishReport* report) {
  auto job = jobs_.job_for(publisher, header.job, now_ns());
  if (!job.is_ok()) {
    ++publishes_over_limit_;
    report->message = "not published: " + job.status().context();
    return nullptr;
  }
  return job.value();
}

uint64_t Planner::user_entries(uid_t uid) const {
  uint64_t n = 0;
  for (const auto& [key, job] : jobs_.all()) {
    if (key.first != uid) {
      continue;
    }
    for (size_t s : job.streams) {
      n += schedule_.stream_entries(s);
    }
    for (const auto& [name, m] : job.manifests) {
      n += m->size();
    }
  }
  return n;
}

cachestore::Status Planner::admission(const Job& job, const OrderHeader& header, bool manifest,
                                      uint64_t entries) const {
  uint64_t freed = 0;  // what the upload replaces goes as it comes
  size_t new_streams = 0;
  if (manifest) {
    auto old = job.manifests.find(header.manifest.value_or(kDefaultManifest));
    freed = old == job.manifests.end() ? 0 : old->second->size();
  } else {
    const auto existing =
        schedule_.find_stream(Jobs::stream_key(job, header.stream.value_or(kDefaultStream)));
    new_streams = existing ? 0 : 1;
    if (existing &&
        (header.restart || (header.epoch && *header.epoch < schedule_.view(*existing).epoch))) {
      freed = schedule_.stream_entries(*existing);  // a restart drops what was queued
    }
  }
  return jobs_.check(job, new_streams, entries, freed, user_entries(job.uid));
}

cachestore::Status Planner::admits(const Publisher& publisher, const OrderHeader& header,
                                   bool manifest, uint64_t entries) {
  MutexLock lock(mu_);
  cachestore::Status verdict = cachestore::Status::ok();
  if (const Job* job = jobs_.find(publisher, header.job)) {
    verdict = admission(*job, header, manifest, entries);
  } else {
    verdict = jobs_.check_new_job(publisher);
    if (verdict.is_ok()) {
      Job blank;
      blank.uid = publisher.uid;
      blank.name = header.job.value_or("");
      verdict = admission(blank, header, manifest, entries);
    }
  }
  if (!verdict.is_ok()) {
    ++publishes_over_limit_;
  }
  return verdict;
}

void Planner::reset_stream(size_t stream) {
  if (streams_.size() <= stream) {
    streams_.resize(stream + 1);
    rates_.resize(stream + 1);
    epoch_started_ns_.resize(stream + 1, now_ns());
    stream_job_.resize(stream + 1, nullptr);
    finish_after_count_.resize(stream + 1, false);
    uncounted_.resize(stream + 1, 0);
  }
  streams_[stream] = StreamStats{};
  rates_[stream] = Rate{};
  epoch_started_ns_[stream] = now_ns();
  stream_job_[stream] = nullptr;
  finish_after_count_[stream] = false;
  uncounted_[stream] = 0;
}

PublishReport Planner::publish(const Publisher& publisher, const OrderHeader& header,
                               std::vector<FileId> entries, RejectReport rejects) {
  PublishReport report;
  report.stream = header.stream.value_or(kDefaultStream);
  report.accepted = entries.size();
  report.rejects = std::move(rejects);
  {
    MutexLock lock(mu_);
    Job* job = job_of(publisher, header, &report);
    cachestore::Status admitted = cachestore::Status::ok();
    std::string key;
    if (job != nullptr) {
      key = Jobs::stream_key(*job, report.stream);
      admitted = admission(*job, header, false, entries.size());
      if (!admitted.is_ok()) {
        ++publishes_over_limit_;
      }
    }
    auto published =
        job == nullptr || !admitted.is_ok()
            ? cachestore::Result<Schedule::Published>(
                  job == nullptr ? cachestore::Status::error(EDQUOT, report.message) : admitted)
            : schedule_.publish(key, header.epoch, std::move(entries),
                                job->permanent ? std::nullopt : std::optional<uint32_t>(job->uid),
                                header.restart);
    if (!published.is_ok()) {
      const std::string why =
          job == nullptr ? report.message : "not published: " + published.status().context();
      report.message = "stream " + report.stream + ": " + why;
      if (job != nullptr && job->streams.empty() && job->manifests.empty()) {
        jobs_.erase(*job);  // a refused first upload leaves nothing behind
      }
      report = record(std::move(report));
    } else {
      const auto& p = published.value();
      report.ok = true;
      report.epoch = p.epoch;
      report.message = "job " + job->name + " stream " + report.stream + " epoch " +
                       std::to_string(p.epoch) + ": " + std::to_string(report.accepted) +
                       " entries published" +
                       (p.restarted  ? " (restarting the stream)"
                        : p.replaced ? " (replacing the earlier order)"
                                     : "") +
                       ", " + std::to_string(report.rejects.total) + " skipped";
      if (p.new_stream) {
        reset_stream(p.stream);
        stream_job_[p.stream] = job;
        job->streams.push_back(p.stream);
        streams_[p.stream].name = report.stream;
        streams_[p.stream].job = job->name;
        streams_[p.stream].uid = job->uid;
      }
      if (p.restarted) {
        // Epoch numbers start over: what the run before did stays in total, not in history
        // (which is keyed by epoch number).
        StreamStats& st = streams_[p.stream];
        ++st.restarts;
        add_record(st.total, st.current);
        st.history.clear();
        st.current = EpochRecord{};
        finish_after_count_[p.stream] = false;
        epoch_started_ns_[p.stream] = now_ns();
      }
      note_rejects(p.stream, report.rejects);
      if (streams_[p.stream].current.opens == 0) {
        const auto view = schedule_.view(p.stream);
        streams_[p.stream].current.epoch = view.epoch;
        streams_[p.stream].current.length = view.epoch_length;
      }
      dirty_ = true;
      wake_.notify_one();
      report = record(std::move(report));
    }
  }
  cachestore::log(report.ok ? LogLevel::kInfo : LogLevel::kWarning, "publish: %s",
                  report.message.c_str());
  for (const auto& example : report.rejects.examples) {
    cachestore::log(LogLevel::kWarning, "publish: skipped %s", example.c_str());
  }
  return report;
}

PublishReport Planner::publish_manifest(const Publisher& publisher, const OrderHeader& header,
                                        std::vector<FileId> manifest, RejectReport rejects) {
  PublishReport report;
  const std::string name = header.manifest.value_or(kDefaultManifest);
  report.stream = "manifest";
  report.accepted = manifest.size();
  report.rejects = std::move(rejects);
  {
    MutexLock lock(mu_);
    Job* job = manifest.empty() ? nullptr : job_of(publisher, header, &report);
    if (manifest.empty()) {
      report.message = "manifest: no entries; not published";
    } else if (job != nullptr) {
      cachestore::Status admitted = admission(*job, header, true, manifest.size());
      if (!admitted.is_ok()) {
        ++publishes_over_limit_;
        report.message = "manifest " + name + ": not published: " + admitted.context();
        if (job->streams.empty() && job->manifests.empty()) {
          jobs_.erase(*job);
        }
      } else {
        report.ok = true;
        report.message = "job " + job->name + " manifest " + name + ": " +
                         std::to_string(manifest.size()) + " paths, " +
                         std::to_string(report.rejects.total) + " skipped";
        job->manifests[name] = std::make_shared<const std::vector<FileId>>(std::move(manifest));
      }
    }
    report = record(std::move(report));
  }
  cachestore::log(report.ok ? LogLevel::kInfo : LogLevel::kWarning, "publish: %s",
                  report.message.c_str());
  return report;
}

PublishReport Planner::refuse(PublishReport report) {
  report.ok = false;
  {
    MutexLock lock(mu_);
    report = record(std::move(report));
  }
  cachestore::log(LogLevel::kWarning, "publish: %s%s%s", report.stream.c_str(),
                  report.stream.empty() ? "" : ": ", report.message.c_str());
  return report;
}

std::shared_ptr<const std::vector<FileId>> Planner::manifest(const Publisher& publisher,
                                                             const OrderHeader& header) const {
  MutexLock lock(mu_);
  const Job* job = jobs_.find(publisher, header.job);
  if (job == nullptr) {
    return nullptr;
  }
  auto m = job->manifests.find(header.manifest.value_or(kDefaultManifest));
  return m == job->manifests.end() ? nullptr : m->second;
}

void Planner::end_job(Job& job) {
  for (size_t s : job.streams) {
    schedule_.drop_stream(s);
    reset_stream(s);
  }
  cachestore::log(LogLevel::kInfo, "job %s of user %u ended: %zu streams and %zu manifests dropped",
                  job.name.c_str(), static_cast<unsigned>(job.uid), job.streams.size(),
                  job.manifests.size());
  ++jobs_ended_;
  jobs_.erase(job);
  dirty_ = true;
}

void Planner::end_finished_jobs() {
  struct Candidate {
    std::pair<uid_t, std::string> key;
    std::vector<ProcessRef> anchors;
    int64_t last_active_ns;
  };

  std::vector<Candidate> candidates;
  const int64_t now = now_ns();
  {
    MutexLock lock(mu_);
    if (now - last_sweep_ns_ < kJobSweepNs) {
      return;
    }
    last_sweep_ns_ = now;
    for (const auto& [key, job] : jobs_.all()) {
      if (!job.permanent) {
        candidates.push_back(Candidate{key, job.anchors, job.last_active_ns});
      }
    }
  }
  // /proc is read without the lock: a publish racing this sweep adds an anchor or activity,
  // which the check below sees.
  const auto idle_ns = static_cast<int64_t>(options_.limits.idle_timeout_s * 1e9);
  std::vector<Candidate> ended;
  for (auto& c : candidates) {
    const bool idle = now - c.last_active_ns > idle_ns;
    const bool exited = !c.anchors.empty() && std::none_of(c.anchors.begin(), c.anchors.end(),
                                                           [](const auto& p) { return alive(p); });
    if (idle || exited) {
      ended.push_back(std::move(c));
    }
  }
  if (ended.empty()) {
    return;
  }
  MutexLock lock(mu_);
  for (const auto& c : ended) {
    auto it = jobs_.all().find(c.key);
    if (it != jobs_.all().end() && it->second.anchors == c.anchors &&
        it->second.last_active_ns == c.last_active_ns) {
      end_job(it->second);
    }
  }
  wake_.notify_one();
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
  auto match = schedule_.on_open(id, opener);
  if (!match) {
    ++unscheduled_opens_;
    return std::nullopt;
  }
  const size_t s = match->stream;
  const int64_t now = now_ns();
  if (stream_job_[s] != nullptr) {
    stream_job_[s]->last_active_ns = now;
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

uint64_t Planner::next_use(FileId id) {
  MutexLock lock(mu_);
  return schedule_.next_use(id);
}

PlannerStats Planner::stats() const {
  MutexLock lock(mu_);
  PlannerStats out;
  out.planning = dirty_ || passing_;
  // Empty files measured so far must not make the mean 0 (a division below).
  const double mean_bytes =
      copies_measured_ > 0 ? std::max(1.0, mean_file_bytes_) : kInitialFileBytes;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (!schedule_.stream_live(s)) {
      continue;
    }
    StreamStats& st = out.streams.emplace_back(streams_[s]);
    st.view = schedule_.view(s);
    st.window_files = window_for(s);
    st.rate_files_s = rates_[s].per_s;
    st.lead_s =
        st.rate_files_s > 0 ? static_cast<double>(st.view.planned_ahead) / st.rate_files_s : 0;
    const double dataset = static_cast<double>(st.view.epoch_length) * mean_bytes;
    st.hit_rate_bound = options_.cache_capacity == UINT64_MAX || dataset == 0
                            ? 1.0
                            : std::min(1.0, static_cast<double>(options_.cache_capacity) / dataset);
    add_record(st.total, st.current);
  }
  out.publishes = publishes_;
  out.publish_failures = publish_failures_;
  out.last_publish = last_publish_;
  for (const auto& [key, job] : jobs_.all()) {
    for (const auto& [name, m] : job.manifests) {
      out.manifest_entries += m->size();
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
