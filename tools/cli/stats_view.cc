#include "tools/cli/stats_view.h"

#include <stdio.h>
#include <time.h>

#include <algorithm>

namespace epochfs::tools {

std::string bar(double done, double ahead, int width) {
  std::string out(static_cast<size_t>(width), '.');
  const auto cells = [&](double f) {
    return static_cast<int>(std::min(1.0, std::max(0.0, f)) * width + 0.5);
  };
  const int d = cells(done);
  const int a = cells(done + ahead);
  for (int i = 0; i < width; ++i) {
    out[static_cast<size_t>(i)] = i < d ? '#' : i < a ? '>' : '.';
  }
  return "[" + out + "]";
}

double num(const StatsDoc& doc, const std::string& key) { return doc.number(key).value_or(0); }

std::set<std::string> stream_ids(const StatsDoc& doc) {
  const std::string prefix = "prefetch.streams.";
  const std::string suffix = ".epoch_length";  // a stream's own field; its epochs have none
  std::set<std::string> ids;
  for (const auto& [key, value] : doc.values) {
    if (key.size() > prefix.size() + suffix.size() && key.rfind(prefix, 0) == 0 &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ids.insert(key.substr(prefix.size(), key.size() - prefix.size() - suffix.size()));
    }
  }
  return ids;
}

std::string cache_line(const StatsDoc& doc) {
  char buf[256];
  const double used = num(doc, "cache.used_bytes");
  if (doc.values.count("cache.capacity_bytes") && doc.values.at("cache.capacity_bytes") != "null") {
    const double cap = num(doc, "cache.capacity_bytes");
    snprintf(buf, sizeof(buf), "cache  %s %s / %s (%.0f%%)  %.0f files  copies in flight %.0f",
             bar(cap > 0 ? used / cap : 0, 0, 20).c_str(), human_bytes(used).c_str(),
             human_bytes(cap).c_str(), cap > 0 ? 100 * used / cap : 0,
             num(doc, "cache.files_cached"), num(doc, "cache.copies_in_flight"));
  } else {
    snprintf(buf, sizeof(buf), "cache  %s used, no limit  %.0f files  copies in flight %.0f",
             human_bytes(used).c_str(), num(doc, "cache.files_cached"),
             num(doc, "cache.copies_in_flight"));
  }
  return buf;
}

std::string stream_line(const StatsDoc& doc, const std::string& id, bool with_bar) {
  const std::string at = "prefetch.streams." + id + ".";
  const double length = num(doc, at + "epoch_length");
  const double position = num(doc, at + "position");
  const double lead = num(doc, at + "lead_files");
  const double hits = num(doc, at + "this_epoch.hits");
  const double misses = num(doc, at + "this_epoch.misses");
  const auto text = [&](const std::string& key) {
    auto it = doc.values.find(at + key);
    return it == doc.values.end() ? std::string("?") : it->second;
  };
  char buf[480];
  snprintf(buf, sizeof(buf),
           "stream %s  epoch %.0f %s %.0f%% (%.0f/%.0f)  ahead %.0f files (%.1f s)  hits %.1f%% "
           "(bound %.0f%%)  stall %.1f s this epoch  %.0f files/s  job %s (uid %s)",
           text("stream").c_str(), num(doc, at + "epoch"),
           with_bar
               ? bar(length > 0 ? position / length : 0, length > 0 ? lead / length : 0, 30).c_str()
               : "",
           length > 0 ? 100 * position / length : 0, position, length, lead,
           num(doc, at + "lead_seconds"), hits + misses > 0 ? 100 * hits / (hits + misses) : 0,
           100 * num(doc, at + "hit_rate_bound"), num(doc, at + "this_epoch.stall_seconds"),
           num(doc, at + "rate_files_per_second"), text("job").c_str(), text("user").c_str());
  return buf;
}

std::optional<std::string> source_line(const StatsDoc& doc) {
  auto state = doc.values.find("source_health.state");
  if (state == doc.values.end() || state->second == "ok") {
    return std::nullopt;
  }
  const time_t since = static_cast<time_t>(num(doc, "source_health.since"));
  char when[32];
  struct tm tm_since;
  strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&since, &tm_since));
  char buf[512];
  snprintf(buf, sizeof(buf),
           "source %s since %s (%s)  answered from the cache %.0f  waited %.0f  failed %.0f",
           state->second.c_str(), when,
           doc.values.count("source_health.last_error")
               ? doc.values.at("source_health.last_error").c_str()
               : "",
           num(doc, "source_health.outage_answers"), num(doc, "source_health.outage_waits"),
           num(doc, "source_health.outage_failures"));
  return std::string(buf);
}

std::string opens_line(const StatsDoc& doc) {
  char buf[384];
  snprintf(
      buf, sizeof(buf),
      "reads  %.0f opens: %.1f%% hits, %.0f misses, %.0f waited for a copy (%.1f s); %.1f "
      "requests per open\n"
      "bytes  %s from the cache, %s from the source (data path: %s)",
      num(doc, "opens"), 100 * num(doc, "hit_rate"), num(doc, "misses"), num(doc, "waits"),
      num(doc, "stall_seconds"), num(doc, "requests.per_open"),
      human_bytes(num(doc, "bytes_from_cache")).c_str(),
      human_bytes(num(doc, "bytes_from_source")).c_str(),
      doc.values.count("data_path.mode") ? doc.values.at("data_path.mode").c_str() : "classic");
  return buf;
}

std::vector<std::string> problem_lines(const StatsDoc& doc) {
  // Counters that are 0 on a healthy mount, with what a person should make of them.
  static const std::pair<const char*, const char*> kTrouble[] = {
      {"cache.errors_io", "I/O errors on the cache disk (reads went to the source)"},
      {"cache.errors_no_space", "copies given up for a full cache disk"},
      {"cache.dropped_damaged", "cached copies found damaged and dropped"},
      {"cache.hung_disk_bypasses", "reads sent to the source past a hung cache disk"},
      {"prefetch.publish_failures", "orders refused (epochfs publish says why)"},
      {"prefetch.publishes_over_limit", "orders refused at a per-user or mount limit"},
      {"prefetch.uploads_over_limit", "order uploads refused at the upload memory limit"},
      {"waits_abandoned", "opens that gave up waiting for a copy"},
      {"source_health.outages", "outages of the source"},
      {"source_health.timeouts", "source calls past --source-timeout"},
  };
  std::vector<std::string> out;
  for (const auto& [key, meaning] : kTrouble) {
    if (const double n = num(doc, key); n > 0) {
      char buf[256];
      snprintf(buf, sizeof(buf), "%.0f %s (%s)", n, meaning, key);
      out.emplace_back(buf);
    }
  }
  for (const auto& id : stream_ids(doc)) {
    const std::string at = "prefetch.streams." + id + ".";
    if (const double n = num(doc, at + "rejected_entries"); n > 0) {
      auto name = doc.values.find(at + "stream");
      char buf[384];
      snprintf(buf, sizeof(buf), "%.0f entries of stream %s name no file its publisher can read", n,
               name == doc.values.end() ? id.c_str() : name->second.c_str());
      out.emplace_back(buf);
    }
  }
  return out;
}

}  // namespace epochfs::tools
