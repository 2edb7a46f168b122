// Planner, continued: publishes and jobs. An order or manifest is admitted against its job's
// and user's limits, becomes a stream's epoch (a rerun of a job restarts its streams), and a
// job's streams and manifests go when its processes exit or it stays idle too long.
#include <algorithm>
#include <unordered_map>

#include "cachestore/log.h"
#include "prefetch/planner.h"

namespace epochfs::prefetch {

using cachestore::LogLevel;
using cachestore::MutexLock;
using cachestore::now_ns;

namespace {

constexpr char kDefaultStream[] = "default";
constexpr char kDefaultManifest[] = "default";
constexpr int64_t kJobSweepNs = 1'000'000'000;

// An open walks its file's occurrences in every order: a file repeated without bound (one path
// published 16 M times) would make each open of it, under the planner's lock, as slow as the
// order is long. Occurrences of one file past Schedule::kMaxRepeats in one epoch are skipped
// and reported as rejected entries; the trainer's opens of them are then unscheduled.
size_t max_id(const std::vector<FileId>& entries) {
  return entries.empty() ? 0 : size_t{*std::max_element(entries.begin(), entries.end())};
}

void drop_repeats(std::vector<FileId>& entries, RejectReport& rejects) {
  std::vector<uint8_t> seen(max_id(entries) + 1, 0);
  uint64_t dropped = 0;
  size_t kept = 0;
  for (FileId id : entries) {
    if (seen[id] == Schedule::kMaxRepeats) {
      ++dropped;
      continue;
    }
    ++seen[id];
    entries[kept++] = id;
  }
  entries.resize(kept);
  if (dropped > 0) {
    rejects.total += dropped;
    if (rejects.examples.size() < RejectReport::kExamples) {
      rejects.examples.push_back(std::to_string(dropped) + " entries repeat a file more than " +
                                 std::to_string(Schedule::kMaxRepeats) + " times in the epoch");
    }
  }
}

}  // namespace

PublishReport Planner::record(PublishReport report) {
  ++publishes_;
  if (!report.ok) {
    ++publish_failures_;
  }
  last_publish_ = report;
  last_publish_by_user_[report.uid] = report;
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

uint64_t Planner::entries_held(std::optional<uid_t> uid) const {
  uint64_t n = 0;
  for (const auto& [key, job] : jobs_.all()) {
    if ((uid && key.first != *uid) || job.permanent) {
      continue;
    }
    for (size_t s : job.streams) {
      n += schedule_.stream_entries(s);
    }
    for (const auto& [name, m] : job.manifests) {
      n += m->entries();
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
    freed = old == job.manifests.end() ? 0 : old->second->entries();
  } else {
    const auto existing =
        schedule_.find_stream(Jobs::stream_key(job, header.stream.value_or(kDefaultStream)));
    new_streams = existing ? 0 : 1;
    if (existing &&
        (header.restart || (header.epoch && *header.epoch < schedule_.view(*existing).epoch))) {
      freed = schedule_.stream_entries(*existing);  // a restart drops what was queued
    }
  }
  return jobs_.check(job, new_streams, entries, freed, entries_held(job.uid),
                     entries_held(std::nullopt));
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

namespace {

// What the published message adds about the entries looked up: nothing when all were found.
std::string sample_note(const EntrySample& sample) {
  if (sample.found == sample.checked) {
    return "";
  }
  return "; " + std::to_string(sample.found) + " of " + std::to_string(sample.checked) +
         " entries looked up name a file its publisher can read" +
         (sample.mostly_missing() ? " (paths are relative to the source's root)" : "");
}

// What a published order's message says.
std::string published_message(const Job& job, const PublishReport& report,
                              const Schedule::Published& p) {
  return "job " + job.name + " stream " + report.stream + " epoch " + std::to_string(p.epoch) +
         ": " + std::to_string(report.accepted) + " entries published" +
         (p.restarted  ? " (restarting the stream)"
          : p.replaced ? " (replacing the earlier order)"
                       : "") +
         ", " + std::to_string(report.rejects.total) + " skipped" + sample_note(report.sample);
}

}  // namespace

cachestore::Result<Schedule::Published> Planner::place(Job* job, const OrderHeader& header,
                                                       const std::string& stream,
                                                       std::vector<FileId> entries,
                                                       const std::vector<uint32_t>& uses,
                                                       const std::string& why) {
  if (job == nullptr) {
    return cachestore::Status::error(EDQUOT, why);
  }
  cachestore::Status admitted = admission(*job, header, false, entries.size());
  if (!admitted.is_ok()) {
    ++publishes_over_limit_;
    return admitted;
  }
  return schedule_.publish(Jobs::stream_key(*job, stream), header.epoch, std::move(entries),
                           job->permanent ? std::nullopt : std::optional<uint32_t>(job->uid),
                           header.restart, uses);
}

void Planner::follow_published(Job& job, const Schedule::Published& p, const std::string& stream) {
  if (p.new_stream) {
    reset_stream(p.stream);
    stream_job_[p.stream] = &job;
    job.streams.push_back(p.stream);
    streams_[p.stream].name = stream;
    streams_[p.stream].job = job.name;
    streams_[p.stream].uid = job.uid;
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
  if (streams_[p.stream].current.opens == 0) {
    const auto view = schedule_.view(p.stream);
    streams_[p.stream].current.epoch = view.epoch;
    streams_[p.stream].current.length = view.epoch_length;
  }
}

PublishReport Planner::publish(const Publisher& publisher, const OrderHeader& header,
                               std::vector<FileId> entries, RejectReport rejects,
                               EntrySample sample, std::vector<FileId> block_files) {
  PublishReport report;
  report.uid = publisher.uid;
  report.sample = sample;
  report.stream = header.stream.value_or(kDefaultStream);
  report.rejects = std::move(rejects);
  report.accepted = entries.size();
  std::vector<uint32_t> uses;
  if (!block_files.empty()) {
    uses = Schedule::thin_repeats(entries);  // accepted: the blocks named, before thinning
  } else {
    drop_repeats(entries, report.rejects);
    report.accepted = entries.size();
  }
  {
    MutexLock lock(mu_);
    Job* job = job_of(publisher, header, &report);
    auto published = place(job, header, report.stream, std::move(entries), uses, report.message);
    if (!published.is_ok()) {
      report.message =
          "stream " + report.stream + ": " +
          (job == nullptr ? report.message : "not published: " + published.status().context());
      if (job != nullptr && job->streams.empty() && job->manifests.empty()) {
        jobs_.erase(*job);  // a refused first upload leaves nothing behind
      }
    } else {
      const auto& p = published.value();
      report.ok = true;
      report.epoch = p.epoch;
      report.message = published_message(*job, report, p);
      follow_published(*job, p, report.stream);
      // Before the order is in place would be better still; from here, the publisher's next
      // open of a file it names by ranges reads it by blocks.
      set_block_files(*job, "stream " + report.stream, std::move(block_files));
      note_rejects(p.stream, report.rejects);
      dirty_ = true;
      wake_.notify_one();
    }
    report = record(std::move(report));
  }
  if (report.ok && sink_ != nullptr) {
    sink_->published();
  }
  cachestore::log(report.ok ? LogLevel::kInfo : LogLevel::kWarning, "publish: %s",
                  report.message.c_str());
  for (const auto& example : report.rejects.examples) {
    cachestore::log(LogLevel::kWarning, "publish: skipped %s", example.c_str());
  }
  return report;
}

PublishReport Planner::publish_manifest(const Publisher& publisher, const OrderHeader& header,
                                        Manifest manifest, RejectReport rejects,
                                        std::vector<FileId> block_files) {
  PublishReport report;
  report.uid = publisher.uid;
  const std::string name = header.manifest.value_or(kDefaultManifest);
  report.stream = "manifest";
  report.accepted = manifest.ids.size();
  report.rejects = std::move(rejects);
  {
    MutexLock lock(mu_);
    Job* job = manifest.ids.empty() ? nullptr : job_of(publisher, header, &report);
    if (manifest.ids.empty()) {
      report.message = "manifest: no entries; not published";
    } else if (job != nullptr) {
      cachestore::Status admitted = admission(*job, header, true, manifest.entries());
      if (!admitted.is_ok()) {
        ++publishes_over_limit_;
        report.message = "manifest " + name + ": not published: " + admitted.context();
        if (job->streams.empty() && job->manifests.empty()) {
          jobs_.erase(*job);
        }
      } else {
        report.ok = true;
        report.message = "job " + job->name + " manifest " + name + ": " +
                         std::to_string(manifest.ids.size()) + " paths, " +
                         std::to_string(report.rejects.total) + " skipped";
        auto& held = job->manifests[name];
        if (held) {
          count_manifest(held->ids, -1);
        }
        count_manifest(manifest.ids, +1);
        held = std::make_shared<const Manifest>(std::move(manifest));
        set_block_files(*job, "manifest " + name, std::move(block_files));
      }
    }
    report = record(std::move(report));
  }
  cachestore::log(report.ok ? LogLevel::kInfo : LogLevel::kWarning, "publish: %s",
                  report.message.c_str());
  return report;
}

PublishReport Planner::refuse(PublishReport report, bool over_limit) {
  report.ok = false;
  {
    MutexLock lock(mu_);
    publishes_over_limit_ += over_limit ? 1 : 0;
    report = record(std::move(report));
  }
  cachestore::log(LogLevel::kWarning, "publish: %s%s%s", report.stream.c_str(),
                  report.stream.empty() ? "" : ": ", report.message.c_str());
  return report;
}

Planner::HeldManifest Planner::manifest(const Publisher& publisher,
                                        const OrderHeader& header) const {
  MutexLock lock(mu_);
  const Job* job = jobs_.find(publisher, header.job);
  if (job == nullptr) {
    return {};
  }
  const std::string name = header.manifest.value_or(kDefaultManifest);
  auto m = job->manifests.find(name);
  if (m == job->manifests.end()) {
    return {};
  }
  auto files = job->block_files.find("manifest " + name);
  return {m->second, files == job->block_files.end() ? std::vector<FileId>() : files->second};
}

void Planner::set_block_files(Job& job, const std::string& key, std::vector<FileId> files) {
  const uint32_t reader = job.permanent ? BlockReaders::kAnyone : job.uid;
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  block_readers_.add(reader, files);  // added before removed: a file in both stays read so
  auto held = job.block_files.find(key);
  if (held != job.block_files.end()) {
    block_readers_.remove(reader, held->second);
    job.block_files.erase(held);
  }
  if (!files.empty()) {
    job.block_files.emplace(key, std::move(files));
  }
}

void Planner::end_job(Job& job) {
  for (size_t s : job.streams) {
    schedule_.drop_stream(s);
    reset_stream(s);
  }
  while (!job.block_files.empty()) {
    set_block_files(job, job.block_files.begin()->first, {});
  }
  for (const auto& [name, manifest] : job.manifests) {
    count_manifest(manifest->ids, -1);
  }
  for (FileId id : job.registered) {
    candidates_.push_back(Registered{id, job.uid});
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

}  // namespace epochfs::prefetch
