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
#include "tools/cli/stats_view.h"

namespace epochfs::tools {
namespace {

using Clock = std::chrono::steady_clock;

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
