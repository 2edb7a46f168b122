// The lines a person reads about a mount, built from its stats document (docs/stats.md): the
// cache, the source, each stream, and what went wrong. `epochfs stats` prints them once as a
// summary; `epochfs stats --watch` redraws them with throughputs.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/cli/stats_doc.h"

namespace epochfs::tools {

// The number at key, 0 if absent.
double num(const StatsDoc& doc, const std::string& key);

// A bar of `width` cells: '#' up to done, '>' up to done + ahead (fractions of the whole).
std::string bar(double done, double ahead, int width);

// The stream ids in the document (prefetch.streams.<id>...), whatever dots an id holds.
std::set<std::string> stream_ids(const StatsDoc& doc);

// "cache  ..." : fill against capacity, files cached, copies in flight.
std::string cache_line(const StatsDoc& doc);

// "stream <name>  epoch ..." : position, lead, hits against their bound, stall, rate, job.
// With a bar when for a terminal.
std::string stream_line(const StatsDoc& doc, const std::string& id, bool with_bar);

// "source <state> since ..." while the source is slow or down; nothing when it is well.
std::optional<std::string> source_line(const StatsDoc& doc);

// "reads  ..." and "bytes  ..." (two lines): opens, hits, misses, waits and stall, requests
// per open; bytes by origin.
std::string opens_line(const StatsDoc& doc);

// One line per counter of trouble that is not zero (I/O errors, a full disk, damaged copies,
// refused publishes, ...), each saying what it means; empty when there is none.
std::vector<std::string> problem_lines(const StatsDoc& doc);

}  // namespace epochfs::tools
