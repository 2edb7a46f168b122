// `epochfs stats MOUNT --watch`: a live view of a mount, refreshed every second. On a terminal
// the screen is redrawn: cache fill, hit rate and throughput, then per stream a progress bar
// of the position through the epoch with how far staging runs ahead, the hit rate against its
// bound and the stall this epoch. Elsewhere (a pipe, a log) each refresh prints plain lines.
// Throughputs are differences between two readings of .epochfs/stats over the time between.
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

using Clock = std::chrono::steady_clock;

// A bar of `width` cells: '#' up to done, '>' up to ahead (staged ahead of the position).
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

// The stream ids in the document: prefetch.streams.<id>.epoch_length is a stream's own field
// (its epoch records have none), whatever dots the id holds.
std::set<std::string> stream_ids(const StatsDoc& doc) {
  const std::string prefix = "prefetch.streams.";
  const std::string suffix = ".epoch_length";
  std::set<std::string> ids;
  for (const auto& [key, value] : doc.values) {
    if (key.size() > prefix.size() + suffix.size() && key.rfind(prefix, 0) == 0 &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ids.insert(key.substr(prefix.size(), key.size() - prefix.size() - suffix.size()));
    }
  }
  return ids;
}

struct Rates {
  double source_mbs = 0;
  double cache_mbs = 0;
  double staged_mbs = 0;
};

Rates rates(const StatsDoc& now, const std::optional<StatsDoc>& before, double seconds) {
  Rates r;
  if (!before || seconds <= 0) {
    return r;
  }
  const auto per_s = [&](const std::string& key) {
    return (num(now, key) - num(*before, key)) / seconds / 1e6;
  };
  r.source_mbs = per_s("bytes_from_source");
  r.cache_mbs = per_s("bytes_from_cache");
  r.staged_mbs = per_s("cache.bytes_staged");
  return r;
}

std::string cache_line(const StatsDoc& doc) {
  char buf[256];
  const double used = num(doc, "cache.used_bytes");
  if (doc.values.count("cache.capacity_bytes") && doc.values.at("cache.capacity_bytes") != "null") {
    const double cap = num(doc, "cache.capacity_bytes");
    snprintf(buf, sizeof(buf), "cache  %s %s / %s (%.0f%%)  copies %.0f  in flight %.0f",
             bar(cap > 0 ? used / cap : 0, 0, 20).c_str(), human_bytes(used).c_str(),
             human_bytes(cap).c_str(), cap > 0 ? 100 * used / cap : 0,
             num(doc, "cache.files_cached"), num(doc, "cache.copies_in_flight"));
  } else {
    snprintf(buf, sizeof(buf), "cache  %s used, no limit  copies %.0f  in flight %.0f",
             human_bytes(used).c_str(), num(doc, "cache.files_cached"),
             num(doc, "cache.copies_in_flight"));
  }
  return buf;
}

std::string reads_line(const StatsDoc& doc, const Rates& r) {
  char buf[256];
  snprintf(
      buf, sizeof(buf),
      "reads  hits %.1f%%  from source %.1f MB/s  from cache %.1f MB/s  staged %.1f MB/s  "
      "(data path: %s)",
      100 * num(doc, "hit_rate"), r.source_mbs, r.cache_mbs, r.staged_mbs,
      doc.values.count("data_path.mode") ? doc.values.at("data_path.mode").c_str() : "classic");
  return buf;
}

std::string stream_line(const StatsDoc& doc, const std::string& id, bool terminal) {
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
           terminal
               ? bar(length > 0 ? position / length : 0, length > 0 ? lead / length : 0, 30).c_str()
               : "",
           length > 0 ? 100 * position / length : 0, position, length, lead,
           num(doc, at + "lead_seconds"), hits + misses > 0 ? 100 * hits / (hits + misses) : 0,
           100 * num(doc, at + "hit_rate_bound"), num(doc, at + "this_epoch.stall_seconds"),
           num(doc, at + "rate_files_per_second"), text("job").c_str(), text("user").c_str());
  return buf;
}

// A line while the source is not well (slow or down); nothing when it is.
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

void draw(const std::string& mountpoint, const StatsDoc& doc, const Rates& r, bool terminal) {
  char when[32];
  const time_t now = time(nullptr);
  struct tm tm_now;
  strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&now, &tm_now));
  if (terminal) {
    printf("\x1b[H\x1b[2J");  // home, clear: redraw in place
    printf("epochfs %s  (source %s)  %s\n\n", mountpoint.c_str(),
           doc.values.count("source") ? doc.values.at("source").c_str() : "?", when);
  }
  const std::string prefix = terminal ? "" : std::string(when) + " ";
  printf("%s%s\n%s%s\n", prefix.c_str(), cache_line(doc).c_str(), prefix.c_str(),
         reads_line(doc, r).c_str());
  if (auto health = source_line(doc)) {
    printf("%s%s\n", prefix.c_str(), health->c_str());
  }
  const auto ids = stream_ids(doc);
  if (ids.empty()) {
    printf("%sno order published: a read-through cache (LRU)\n", prefix.c_str());
  }
  for (const auto& id : ids) {
    printf("%s%s\n", prefix.c_str(), stream_line(doc, id, terminal).c_str());
  }
  fflush(stdout);
}

}  // namespace

int cmd_watch(const std::string& path, unsigned count, double interval_s) {
  const std::string mountpoint = absolute_path(path);
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  std::optional<StatsDoc> before;
  Clock::time_point before_at;
  for (unsigned i = 0; count == 0 || i < count; ++i) {
    if (i > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    }
    auto doc = read_stats(mountpoint);
    const Clock::time_point at = Clock::now();
    if (!doc) {
      fprintf(stderr, "epochfs: %s is not an epochfs mount (or it is gone)\n", mountpoint.c_str());
      return 1;
    }
    draw(mountpoint, *doc,
         rates(*doc, before, std::chrono::duration<double>(at - before_at).count()), terminal);
    before = std::move(doc);
    before_at = at;
  }
  return 0;
}

}  // namespace epochfs::tools
