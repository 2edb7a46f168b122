// `epochfs stats`: a summary of the mount, every counter as a table, or the raw JSON document;
// `epochfs verify`.
#include <errno.h>
#include <stdio.h>

#include <chrono>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <utility>

#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/progress.h"
#include "tools/cli/stats_doc.h"
#include "tools/cli/stats_view.h"

namespace epochfs::tools {
namespace {

// Reads and parses the control file <mountpoint>/.epochfs/<name>; says why not on stderr.
std::optional<std::pair<std::string, StatsDoc>> read_control(const std::string& mountpoint,
                                                             const std::string& name) {
  errno = 0;
  std::ifstream in(mountpoint + "/.epochfs/" + name);
  if (!in && errno == EACCES && name == "verify") {
    fprintf(stderr, "epochfs: only root and the mount's owner may verify %s\n", mountpoint.c_str());
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto doc = parse_stats(text.str());
  if (!in || !doc) {
    if (is_dead_mount(mountpoint)) {
      fprintf(stderr,
              "epochfs: %s is a stale mount: its daemon died; `epochfs mount` at the same "
              "path detaches it, or run: epochfs unmount --lazy %s\n",
              mountpoint.c_str(), mountpoint.c_str());
    } else {
      fprintf(stderr, "epochfs: %s is not an epochfs mount (no readable .epochfs/%s)\n",
              mountpoint.c_str(), name.c_str());
    }
    return std::nullopt;
  }
  return std::make_pair(text.str(), std::move(*doc));
}

void print_all(const StatsDoc& doc) {
  for (const auto& [key, value] : doc.values) {
    auto number = doc.number(key);
    std::string shown = value;
    if (number && key.find("bytes") != std::string::npos) {
      shown = human_bytes(*number) + " (" + value + ")";
    } else if (number && key == "hit_rate") {
      char buf[16];
      snprintf(buf, sizeof(buf), "%.1f%%", *number * 100);
      shown = buf;
    } else if (key == "cache.capacity_bytes" && value == "null") {
      shown = "unlimited (free-space reserve only)";
    }
    printf("  %-28s %s\n", key.c_str(), shown.c_str());
  }
}

void print_summary(const std::string& mountpoint, const StatsDoc& doc) {
  printf("%s\n%s\n", cache_line(doc).c_str(), opens_line(doc).c_str());
  if (auto health = source_line(doc)) {
    printf("%s\n", health->c_str());
  }
  const auto ids = stream_ids(doc);
  if (ids.empty()) {
    printf("no order published: a read-through cache (LRU)\n");
  }
  for (const auto& id : ids) {
    printf("%s\n", stream_line(doc, id, false).c_str());
  }
  const auto problems = problem_lines(doc);
  printf("%s\n", problems.empty() ? "no problems counted" : "problems:");
  for (const auto& line : problems) {
    printf("  %s\n", line.c_str());
  }
  printf("every counter: epochfs stats --all %s (docs/stats.md); a live view: --watch\n",
         mountpoint.c_str());
}

}  // namespace

int cmd_stats(const std::string& path, bool json, bool all) {
  const std::string mountpoint = absolute_path(path);
  auto control = read_control(mountpoint, "stats");
  if (!control) {
    return 1;
  }
  if (json) {
    fputs(control->first.c_str(), stdout);
    return 0;
  }
  const StatsDoc& doc = control->second;
  printf("epochfs mount %s (source %s)\n", mountpoint.c_str(),
         doc.values.count("source") ? doc.values.at("source").c_str() : "?");
  if (all) {
    print_all(doc);
  } else {
    print_summary(mountpoint, doc);
  }
  return 0;
}

namespace {

// Reads .epochfs/verify, which runs the check in the daemon: it reads every cached copy, for
// minutes in a large cache. Meanwhile a terminal sees how far it has got.
std::optional<std::pair<std::string, StatsDoc>> run_verify(const std::string& mountpoint) {
  auto control = std::async(std::launch::async, [&] { return read_control(mountpoint, "verify"); });
  Progress progress;
  // Not at once: a refusal or a small cache answers before the first look.
  while (control.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    auto doc = read_stats(mountpoint);
    const double total = doc ? doc->number("cache.verify_total").value_or(0) : 0;
    const double checked = doc ? doc->number("cache.verify_checked").value_or(0) : 0;
    char line[160];
    snprintf(line, sizeof(line), "verifying %s: %.0f of %.0f cached copies", mountpoint.c_str(),
             checked, total);
    progress.show(line);
  }
  progress.clear();
  return control.get();
}

}  // namespace

int cmd_verify(const std::string& path) {
  const std::string mountpoint = absolute_path(path);
  auto control = run_verify(mountpoint);
  if (!control) {
    return 1;
  }
  StatsDoc* doc = &control->second;
  if (doc->values["cache_enabled"] != "true") {
    printf("%s: the cache is off; nothing to verify\n", mountpoint.c_str());
    return 0;
  }
  const double checked = doc->number("checked").value_or(0);
  const double damaged = doc->number("damaged").value_or(0);
  printf("%s: checked %.0f cached copies (%s): %.0f damaged%s\n", mountpoint.c_str(), checked,
         human_bytes(doc->number("bytes").value_or(0)).c_str(), damaged,
         damaged > 0 ? ", dropped; they will be fetched again from the source" : "");
  return 0;
}

}  // namespace epochfs::tools
