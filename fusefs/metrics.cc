#include "fusefs/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cmath>
#include <sstream>

#include "cachestore/log.h"
#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"

namespace epochfs::fusefs {
namespace {

using cachestore::LogLevel;

// Label values escape backslash, double quote and newline (the exposition format's rule).
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

double d(uint64_t v) { return static_cast<double>(v); }

std::string number(double v) {
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// Writes metric families: the HELP and TYPE lines once, then each sample, every sample with
// the mount's own labels first.
class Exposition {
 public:
  explicit Exposition(const MountLabels& mount)
      : base_("mountpoint=\"" + label_value(mount.mountpoint) + "\",source=\"" +
              label_value(mount.source) + "\"") {}

  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    name_ = name;
  }

  // labels: the sample's own, without braces (name="value",...).
  void sample(double v, const std::string& labels = "") {
    out_ << name_ << '{' << base_ << (labels.empty() ? "" : ",") << labels << "} " << number(v)
         << "\n";
  }

  // A histogram family: cumulative buckets (le), then the sum and the count.
  void histogram(const char* name, const char* help,
                 const prefetch::LatencyHistogram::Snapshot& h) {
    family(name, "histogram", help);
    const std::string base = name;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      const bool last = i == prefetch::LatencyHistogram::kBounds.size();
      name_ = base + "_bucket";
      sample(d(cumulative),
             "le=\"" +
                 (last ? std::string("+Inf") : number(prefetch::LatencyHistogram::kBounds[i])) +
                 "\"");
    }
    name_ = base + "_sum";
    sample(h.sum_s);
    name_ = base + "_count";
    sample(d(h.count));
  }

  // A family with one unlabelled sample.
  void one(const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    sample(v);
  }

  std::string text() const { return out_.str(); }

 private:
  const std::string base_;
  std::ostringstream out_;
  std::string name_;
};

void engine_metrics(Exposition& e, const prefetch::EngineStats& s) {
  e.one("epochfs_opens_total", "counter", "Opens of files through the mount.", d(s.opens));
  e.one("epochfs_cache_hits_total", "counter", "Opens served from a cached copy.", d(s.hits));
  e.one("epochfs_cache_misses_total", "counter", "Opens served from the source.", d(s.misses));
  e.one("epochfs_read_from_cache_bytes_total", "counter",
        "Bytes the daemon served from cached copies (not the kernel's passthrough reads).",
        d(s.bytes_from_cache));
  e.one("epochfs_read_from_source_bytes_total", "counter",
        "Bytes readers read from the source (passthrough misses: whole files, at open).",
        d(s.bytes_from_source));
  e.one("epochfs_source_version_checks_total", "counter",
        "Opens that asked the source for the file's version.", d(s.source_stats));
  e.one("epochfs_source_stats_ahead_total", "counter",
        "Cached files stat'ed on the source just ahead of a stream.", d(s.stats_ahead));
  e.one("epochfs_lookups_answered_ahead_total", "counter",
        "Lookups answered from attributes read ahead.", d(s.fresh_lookups));
  e.one("epochfs_waits_total", "counter", "Opens that waited for a copy in flight.", d(s.waits));
  e.one("epochfs_waits_abandoned_total", "counter",
        "Opens that gave up waiting for a copy that wrote nothing for 2 s.", d(s.waits_abandoned));
  e.one("epochfs_stall_seconds_total", "counter",
        "Time opens waited for copies in flight, summed over readers.",
        static_cast<double>(s.stall_ns) / 1e9);
  e.one("epochfs_files_known", "gauge", "Files the daemon has a record of.", d(s.files_known));
  e.one("epochfs_prefetches_total", "counter", "Copies the planner started ahead of a stream.",
        d(s.prefetches));
  e.histogram("epochfs_open_latency_seconds",
              "Time the daemon took to answer an open (a wait for a copy in flight included).",
              s.open_latency);
  e.histogram("epochfs_copy_latency_seconds",
              "Time one copy into the cache took, from its first read to its commit or abort.",
              s.copy_latency);
}

void source_metrics(Exposition& e, const prefetch::SourceHealth& h) {
  e.one("epochfs_source_up", "gauge", "1 while the source answers, 0 while it is down.",
        h.state == prefetch::SourceState::kDown ? 0 : 1);
  e.one("epochfs_source_slow", "gauge",
        "1 while calls into the source take over a fifth of --source-timeout.",
        h.state == prefetch::SourceState::kSlow ? 1 : 0);
  e.one("epochfs_source_outages_total", "counter", "Times the source went down.", d(h.outages));
  e.one("epochfs_source_outage_answers_total", "counter",
        "Lookups and opens answered from what the mount knew while the source was down.",
        d(h.served_known));
  e.one("epochfs_source_outage_waits_total", "counter",
        "Calls that waited for the source to come back, then ran.", d(h.waited));
  e.one("epochfs_source_outage_failures_total", "counter",
        "Calls that failed (EIO) after waiting --outage-wait for the source.", d(h.failed));
  e.one("epochfs_source_timeouts_total", "counter",
        "Calls into the source not answered within --source-timeout.", d(h.timed_out));
}

void cache_metrics(Exposition& e, const prefetch::EngineStats& s) {
  const auto& c = s.cache;
  e.one("epochfs_cache_enabled", "gauge", "1 if the mount has a cache.", s.cache_enabled);
  e.one("epochfs_cache_capacity_bytes", "gauge", "The cache's capacity (+Inf: no limit).",
        c.capacity_bytes == UINT64_MAX ? INFINITY : d(c.capacity_bytes));
  e.one("epochfs_cache_used_bytes", "gauge", "Bytes the cache charges now.", d(c.used_bytes));
  e.one("epochfs_cache_files", "gauge", "Copies ready in the cache.", d(c.files_cached));
  e.one("epochfs_copies_queued", "gauge", "Copies queued or running.", d(s.copies_queued));
  e.one("epochfs_copies_in_flight", "gauge", "Copies running.", d(c.copies_in_flight));
  e.one("epochfs_copy_limit", "gauge", "Prefetch copies allowed in flight now.", d(s.copy_limit));
  e.one("epochfs_staged_files_total", "counter", "Copies completed.", d(c.files_staged));
  e.one("epochfs_staged_bytes_total", "counter", "Bytes copied into the cache.", d(c.bytes_staged));
  e.one("epochfs_copies_aborted_total", "counter",
        "Copies abandoned (the source changed or failed).", d(c.copies_aborted));
  e.one("epochfs_copies_dropped_total", "counter", "Copies not started (queue full).",
        d(s.copies_dropped));
  e.one("epochfs_evictions_total", "counter", "Copies evicted for room.", d(c.evictions));
  e.one("epochfs_reads_ahead_total", "counter",
        "Blocks' copies read into memory ahead of their reads.", d(c.read_ahead));
  e.family("epochfs_copies_refused_total", "counter", "Copies the cache refused, by reason.");
  e.sample(d(c.skipped_no_room), "reason=\"no_room\"");
  e.sample(d(c.bypassed), "reason=\"bypassed\"");
  e.sample(d(c.skipped_suspended), "reason=\"suspended\"");
  e.one("epochfs_hung_disk_bypasses_total", "counter",
        "Opens of cached files served from the source: a cache-disk call was stuck.",
        d(c.hung_disk_bypasses));
  e.family("epochfs_copies_dropped_bad_total", "counter", "Copies dropped, by reason.");
  e.sample(d(c.dropped_stale), "reason=\"stale\"");
  e.sample(d(c.dropped_damaged), "reason=\"damaged\"");
  e.family("epochfs_cache_errors_total", "counter", "Cache-disk errors, by kind.");
  e.sample(d(c.errors_no_space), "kind=\"no_space\"");
  e.sample(d(c.errors_io), "kind=\"io\"");
}

void planner_metrics(Exposition& e, const prefetch::EngineStats& s) {
  const auto& p = s.planner;
  e.one("epochfs_publishes_total", "counter", "Orders and manifests published or refused.",
        d(p.publishes));
  e.one("epochfs_publish_failures_total", "counter", "Orders and manifests refused.",
        d(p.publish_failures));
  e.one("epochfs_schedule_entries", "gauge", "Order entries held.", d(p.schedule_entries));
  e.one("epochfs_schedule_bytes", "gauge", "Memory of the held orders.", d(p.schedule_bytes));
}

// Per-stream families: (name, type, help, value of a stream).
struct StreamFamily {
  const char* name;
  const char* type;
  const char* help;
  double (*value)(const prefetch::StreamStats&);
};

constexpr StreamFamily kStreamFamilies[] = {
    {"epochfs_stream_epoch", "gauge", "The epoch the stream is in.",
     [](const prefetch::StreamStats& s) { return d(s.view.epoch); }},
    {"epochfs_stream_epoch_length_files", "gauge", "Entries in the stream's epoch.",
     [](const prefetch::StreamStats& s) { return d(s.view.epoch_length); }},
    {"epochfs_stream_position_files", "gauge", "The stream's position in its epoch.",
     [](const prefetch::StreamStats& s) { return d(s.view.position); }},
    {"epochfs_stream_lead_files", "gauge", "Files staged or planned ahead of the position.",
     [](const prefetch::StreamStats& s) { return d(s.view.planned_ahead); }},
    {"epochfs_stream_lead_seconds", "gauge", "How far ahead staging runs, in seconds of reading.",
     [](const prefetch::StreamStats& s) { return s.lead_s; }},
    {"epochfs_stream_window_files", "gauge", "The lookahead window.",
     [](const prefetch::StreamStats& s) { return d(s.window_files); }},
    {"epochfs_stream_rate_files_per_second", "gauge", "The stream's consumption rate.",
     [](const prefetch::StreamStats& s) { return s.rate_files_s; }},
    {"epochfs_stream_hit_rate_bound_ratio", "gauge", "Best hit rate a cache of this size allows.",
     [](const prefetch::StreamStats& s) { return s.hit_rate_bound; }},
    {"epochfs_stream_epoch_hits", "gauge", "Hits in the stream's current epoch.",
     [](const prefetch::StreamStats& s) { return d(s.current.hits); }},
    {"epochfs_stream_epoch_misses", "gauge", "Misses in the stream's current epoch.",
     [](const prefetch::StreamStats& s) { return d(s.current.misses); }},
    {"epochfs_stream_epoch_stall_seconds", "gauge", "Waits in the stream's current epoch.",
     [](const prefetch::StreamStats& s) { return static_cast<double>(s.current.stall_ns) / 1e9; }},
    {"epochfs_stream_opens_total", "counter", "Opens the stream made since the mount.",
     [](const prefetch::StreamStats& s) { return d(s.total.opens); }},
    {"epochfs_stream_hits_total", "counter", "Hits of the stream since the mount.",
     [](const prefetch::StreamStats& s) { return d(s.total.hits); }},
    {"epochfs_stream_misses_total", "counter", "Misses of the stream since the mount.",
     [](const prefetch::StreamStats& s) { return d(s.total.misses); }},
    {"epochfs_stream_stall_seconds_total", "counter", "Waits of the stream since the mount.",
     [](const prefetch::StreamStats& s) { return static_cast<double>(s.total.stall_ns) / 1e9; }},
    {"epochfs_stream_read_from_source_bytes_total", "counter",
     "Bytes the stream's opens read from the source.",
     [](const prefetch::StreamStats& s) { return d(s.total.bytes_from_source); }},
};

void stream_metrics(Exposition& e, const prefetch::EngineStats& s) {
  if (s.planner.streams.empty()) {
    return;
  }
  for (const auto& f : kStreamFamilies) {
    e.family(f.name, f.type, f.help);
    for (const auto& st : s.planner.streams) {
      e.sample(f.value(st), "stream=\"" + label_value(st.name) + "\",job=\"" + label_value(st.job) +
                                "\",uid=\"" + std::to_string(st.uid) + "\"");
    }
  }
}

}  // namespace

std::string metrics_text(const prefetch::EngineStats& stats, const DataPathFigures& data_path,
                         const MountLabels& mount, const VerifyFigures& verify,
                         const RequestFigures& requests) {
  Exposition e(mount);
  e.family("epochfs_build_info", "gauge", "The daemon's version; always 1.");
  e.sample(1, "version=\"" EPOCHFS_VERSION "\"");
  engine_metrics(e, stats);
  source_metrics(e, stats.source);
  cache_metrics(e, stats);
  planner_metrics(e, stats);
  e.family("epochfs_requests_total", "counter", "The kernel's requests answered, by kind.");
  for (size_t i = 0; i < requests.size(); ++i) {
    e.sample(d(requests[i]), std::string("kind=\"") + kRequestNames[i] + "\"");
  }
  e.one("epochfs_verify_runs_total", "counter", "Verifies of the cache run.", d(verify.runs));
  e.one("epochfs_verify_opens_shared_total", "counter",
        "Opens of .epochfs/verify that shared a verify under way.", d(verify.shared));
  stream_metrics(e, stats);
  e.one("epochfs_data_path_passthrough", "gauge",
        "1 if the kernel reads cached copies itself (--data-path passthrough).",
        data_path.passthrough ? 1 : 0);
  e.one("epochfs_passthrough_opens_total", "counter", "Opens answered with passthrough.",
        d(data_path.passthrough_opens));
  e.one("epochfs_source_passthrough_opens_total", "counter",
        "Opens answered with passthrough to a source file (misses on a local source).",
        d(data_path.source_passthrough_opens));
  e.one("epochfs_passthrough_backing_files", "gauge", "Backing files registered now.",
        d(data_path.backing_files));
  return e.text();
}

MetricsFileWriter::MetricsFileWriter(std::string path, std::function<std::string()> make,
                                     std::chrono::milliseconds period)
    : path_(std::move(path)), make_(std::move(make)), period_(period) {
  thread_ = std::thread([this] { run(); });
}

MetricsFileWriter::~MetricsFileWriter() {
  {
    cachestore::MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void MetricsFileWriter::run() {
  while (true) {
    write_once();
    cachestore::MutexLock lock(mu_);
    if (!stopping_) {
      wake_.wait_for(period_);  // an early wake-up only writes the file sooner
    }
    if (stopping_) {
      break;
    }
  }
  // Gone with the mount: a file left behind would show frozen figures as if they were live.
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    cachestore::log(LogLevel::kWarning, "cannot remove the metrics file %s: %m", path_.c_str());
  }
}

void MetricsFileWriter::write_once() {
  // Next to the target, so the rename stays within one filesystem.
  const std::string tmp = path_ + ".tmp";
  bool ok = false;
  {
    cachestore::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ok = fd.valid() && cachestore::write_all(fd.get(), make_(), tmp).is_ok() &&
         ::close(fd.release()) == 0 && ::rename(tmp.c_str(), path_.c_str()) == 0;
  }
  if (!ok && !failing_) {
    cachestore::log(LogLevel::kWarning, "cannot write the metrics file %s: %m", path_.c_str());
  }
  failing_ = !ok;
}

}  // namespace epochfs::fusefs
