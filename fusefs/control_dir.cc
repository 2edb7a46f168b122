#include "fusefs/control_dir.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>

#include "fusefs/metrics.h"

namespace epochfs::fusefs {

std::optional<InodeId> control_lookup(InodeId parent, std::string_view name) {
  if (parent == kRootInodeId && name == kControlDirName) {
    return kControlDirId;
  }
  if (parent == kControlDirId && name == "stats") {
    return kStatsFileId;
  }
  if (parent == kControlDirId && name == "verify") {
    return kVerifyFileId;
  }
  if (parent == kControlDirId && name == "metrics") {
    return kMetricsFileId;
  }
  return std::nullopt;
}

struct stat control_attr(InodeId id) {
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = id;
  st.st_uid = getuid();
  st.st_gid = getgid();
  if (id == kControlDirId) {
    // Writable by every user who can reach it: any reader of the dataset may publish orders
    // for their own jobs (prefetch/jobs.h keeps each user's apart). Sticky, as /tmp is.
    st.st_mode = S_IFDIR | S_ISVTX | 0777;
    st.st_nlink = 2;
  } else if (is_upload(id)) {
    st.st_mode = S_IFREG | 0200;  // an order being written
    st.st_nlink = 1;
  } else {
    // Size 0: the content is made at open and read with direct I/O, whatever its length.
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
  }
  return st;
}

namespace {

// Escapes a string for a JSON string literal.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class JsonObject {
 public:
  explicit JsonObject(std::ostringstream& out, int indent) : out_(out), indent_(indent) {
    out_ << "{";
  }

  void field(const char* key, uint64_t v) { start(key) << v; }

  void field(const char* key, double v) { start(key) << v; }

  void field(const char* key, bool v) { start(key) << (v ? "true" : "false"); }

  void field(const char* key, const std::string& v) { start(key) << quoted(v); }

  void null_field(const char* key) { start(key) << "null"; }

  std::ostringstream& start(const char* key) {
    out_ << (first_ ? "\n" : ",\n") << std::string(indent_ + 2, ' ') << quoted(key) << ": ";
    first_ = false;
    return out_;
  }

  void close() { out_ << "\n" << std::string(indent_, ' ') << "}"; }

 private:
  std::ostringstream& out_;
  int indent_;
  bool first_ = true;
};

void source_fields(std::ostringstream& out, const prefetch::SourceHealth& h) {
  JsonObject o(out, 2);
  o.field("state", std::string(prefetch::to_string(h.state)));
  // Unix time the state began; 0 when the source has been well since the mount.
  o.field("since", static_cast<uint64_t>(h.since_wall_s));
  o.field("outages", h.outages);
  o.field("outage_answers", h.served_known);
  o.field("outage_waits", h.waited);
  o.field("outage_failures", h.failed);
  o.field("timeouts", h.timed_out);
  o.field("interrupted", h.interrupted);
  o.field("hung_paths", h.hung_paths);
  o.field("last_error", h.last_error);
  o.close();
}

void cache_fields(std::ostringstream& out, const prefetch::EngineStats& s) {
  const auto& c = s.cache;
  JsonObject o(out, 2);
  o.field("enabled", s.cache_enabled);
  o.field("dir", s.cache_dir);
  if (c.capacity_bytes == UINT64_MAX) {
    o.null_field("capacity_bytes");
  } else {
    o.field("capacity_bytes", c.capacity_bytes);
  }
  o.field("used_bytes", c.used_bytes);
  o.field("files_cached", c.files_cached);
  o.field("copies_queued", s.copies_queued);
  o.field("copies_in_flight", c.copies_in_flight);
  o.field("copy_limit", s.copy_limit);
  o.field("files_staged", c.files_staged);
  o.field("bytes_staged", c.bytes_staged);
  o.field("copies_aborted", c.copies_aborted);
  o.field("copies_dropped", s.copies_dropped);
  o.field("evictions", c.evictions);
  o.field("dropped_stale", c.dropped_stale);
  o.field("dropped_damaged", c.dropped_damaged);
  o.field("skipped_no_room", c.skipped_no_room);
  o.field("bypassed", c.bypassed);
  o.field("skipped_suspended", c.skipped_suspended);
  o.field("hung_disk_bypasses", c.hung_disk_bypasses);
  o.field("read_ahead", c.read_ahead);
  o.field("errors_no_space", c.errors_no_space);
  o.field("errors_io", c.errors_io);
  o.field("verify_checked", c.verify_checked);
  o.field("verify_total", c.verify_total);
  o.close();
}

// The kernel's requests by kind, and all of them per open of a file.
void request_fields(std::ostringstream& out, const RequestFigures& requests, uint64_t opens) {
  JsonObject o(out, 2);
  uint64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    o.field(kRequestNames[i], requests[i]);
    total += requests[i];
  }
  o.field("per_open", opens == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(opens));
  o.close();
}

void epoch_fields(std::ostringstream& out, int indent, const prefetch::EpochRecord& r) {
  JsonObject o(out, indent);
  o.field("epoch", r.epoch);
  o.field("length", r.length);
  o.field("opens", r.opens);
  o.field("hits", r.hits);
  o.field("misses", r.misses);
  o.field("hit_rate", r.hits + r.misses == 0 ? 0.0 : double(r.hits) / double(r.hits + r.misses));
  o.field("waits", r.waits);
  o.field("stall_seconds", static_cast<double>(r.stall_ns) / 1e9);
  o.field("bytes_from_source", r.bytes_from_source);
  o.field("prefetches", r.copies_started);
  o.field("seconds", r.seconds);
  o.close();
}

void stream_fields(std::ostringstream& out, const prefetch::StreamStats& st) {
  JsonObject o(out, 6);
  o.field("stream", st.name);
  o.field("job", st.job);
  o.field("user", st.uid);
  o.field("restarts", st.restarts);
  o.field("active", st.view.active);
  o.field("epoch", st.view.epoch);
  o.field("epoch_length", st.view.epoch_length);
  o.field("position", st.view.position);
  o.field("epochs_queued", st.view.epochs_queued);
  o.field("lead_files", st.view.planned_ahead);
  o.field("lead_seconds", st.lead_s);
  o.field("window_files", st.window_files);
  o.field("rate_files_per_second", st.rate_files_s);
  o.field("hit_rate_bound", st.hit_rate_bound);
  o.field("rejected_entries", st.rejected_entries);
  epoch_fields(o.start("this_epoch"), 8, st.current);
  epoch_fields(o.start("total"), 8, st.total);
  JsonObject history(o.start("finished_epochs"), 8);
  for (const auto& r : st.history) {
    epoch_fields(history.start(std::to_string(r.epoch).c_str()), 10, r);
  }
  history.close();
  o.close();
}

}  // namespace

prefetch::EngineStats as_seen_by(prefetch::EngineStats stats, uid_t viewer) {
  if (viewer == 0 || viewer == ::geteuid()) {
    return stats;
  }
  auto& p = stats.planner;
  const auto others = std::remove_if(p.streams.begin(), p.streams.end(),
                                     [viewer](const auto& st) { return st.uid != viewer; });
  p.streams_of_other_users = static_cast<uint64_t>(p.streams.end() - others);
  p.streams.erase(others, p.streams.end());
  auto mine = p.last_publish_by_user.find(viewer);
  p.last_publish = mine == p.last_publish_by_user.end()
                       ? std::nullopt
                       : std::optional<prefetch::PublishReport>(mine->second);
  p.last_publish_by_user.clear();
  return stats;
}

namespace {

void prefetch_fields(std::ostringstream& out, const prefetch::EngineStats& s) {
  const auto& p = s.planner;
  JsonObject o(out, 2);
  o.field("publishes", p.publishes);
  o.field("publish_failures", p.publish_failures);
  o.field("publishes_over_limit", p.publishes_over_limit);
  o.field("upload_bytes", s.upload_bytes);
  o.field("path_bytes", s.path_bytes);
  o.field("uploads_over_limit", s.uploads_over_limit);
  o.field("planning", p.planning);
  o.field("jobs", p.jobs);
  o.field("streams_of_other_users", p.streams_of_other_users);
  o.field("jobs_ended", p.jobs_ended);
  if (p.last_publish) {
    JsonObject last(o.start("last_publish"), 4);
    last.field("ok", p.last_publish->ok);
    last.field("message", p.last_publish->message);
    last.field("stream", p.last_publish->stream);
    last.field("epoch", p.last_publish->epoch);
    last.field("accepted", p.last_publish->accepted);
    last.field("rejected", p.last_publish->rejects.total);
    last.field("looked_up", p.last_publish->sample.checked);
    last.field("found", p.last_publish->sample.found);
    last.field("mostly_missing", p.last_publish->sample.mostly_missing());
    JsonObject examples(last.start("rejected_examples"), 6);
    for (size_t i = 0; i < p.last_publish->rejects.examples.size(); ++i) {
      examples.field(std::to_string(i + 1).c_str(), p.last_publish->rejects.examples[i]);
    }
    examples.close();
    last.close();
  } else {
    o.null_field("last_publish");
  }
  o.field("manifest_entries", p.manifest_entries);
  o.field("schedule_entries", p.schedule_entries);
  o.field("schedule_bytes", p.schedule_bytes);
  o.field("unscheduled_opens", p.unscheduled_opens);
  o.field("copy_latency_seconds", p.copy_latency_s);
  o.field("prefetches", s.prefetches);
  JsonObject streams(o.start("streams"), 4);
  for (const auto& st : p.streams) {
    stream_fields(streams.start(st.view.id.c_str()), st);
  }
  streams.close();
  o.close();
}

}  // namespace

std::string verify_json(const cachestore::VerifyReport& r, bool cache_enabled) {
  std::ostringstream out;
  JsonObject o(out, 0);
  o.field("format", uint64_t{1});
  o.field("cache_enabled", cache_enabled);
  o.field("checked", r.checked);
  o.field("bytes", r.bytes);
  o.field("damaged", r.damaged);
  o.close();
  out << "\n";
  return out.str();
}

// How reads of cached files are served (fusefs/passthrough.h).
void data_path_fields(std::ostringstream& out, const DataPathFigures& d, bool implicit_opens) {
  JsonObject o(out, 2);
  o.field("mode", std::string(implicit_opens  ? "no-open"
                              : d.passthrough ? "passthrough"
                                              : "classic"));
  o.field("classic_because", std::string(implicit_opens ? "" : d.classic_because));
  o.field("passthrough_opens", d.passthrough_opens);
  o.field("source_passthrough_opens", d.source_passthrough_opens);
  o.field("backing_files", d.backing_files);
  o.field("transport", std::string(d.fuse_uring ? "io_uring" : "device"));
  o.field("device_because", std::string(d.device_because));
  o.field("ring_requests", d.ring_requests);
  o.close();
}

std::string stats_json(const prefetch::EngineStats& s, const std::string& source, long pid,
                       uint64_t inodes, const DataPathFigures& data_path, bool implicit_opens,
                       const VerifyFigures& verify, const RequestFigures& requests) {
  std::ostringstream out;
  JsonObject o(out, 0);
  o.field("format", uint64_t{1});
  o.field("version", std::string(EPOCHFS_VERSION));
  o.field("order_format", prefetch::kOrderFormat);
  o.field("pid", static_cast<uint64_t>(pid));
  o.field("source", source);
  o.field("opens", s.opens);
  o.field("hits", s.hits);
  o.field("misses", s.misses);
  o.field("hit_rate", s.hits + s.misses == 0 ? 0.0 : double(s.hits) / double(s.hits + s.misses));
  o.field("bytes_from_cache", s.bytes_from_cache);
  o.field("bytes_from_source", s.bytes_from_source);
  o.field("block_hits", s.block_hits);
  o.field("block_misses", s.block_misses);
  o.field("block_waits", s.block_waits);
  o.field("block_stall_seconds", static_cast<double>(s.block_stall_ns) / 1e9);
  o.field("joined_copies", s.joined_copies);
  o.field("joined_bytes", s.joined_bytes);
  o.field("source_version_checks", s.source_stats);
  o.field("source_stats_ahead", s.stats_ahead);
  o.field("lookups_answered_ahead", s.fresh_lookups);
  o.field("files_known", s.files_known);
  o.field("paths_released", s.paths_released);
  o.field("inodes", inodes);
  o.field("waits", s.waits);
  o.field("stall_seconds", static_cast<double>(s.stall_ns) / 1e9);
  o.field("waits_abandoned", s.waits_abandoned);
  o.field("verify_runs", verify.runs);
  o.field("verify_opens_shared", verify.shared);
  request_fields(o.start("requests"), requests, s.opens);
  source_fields(o.start("source_health"), s.source);
  data_path_fields(o.start("data_path"), data_path, implicit_opens);
  cache_fields(o.start("cache"), s);
  prefetch_fields(o.start("prefetch"), s);
  o.close();
  out << "\n";
  return out.str();
}

}  // namespace epochfs::fusefs
