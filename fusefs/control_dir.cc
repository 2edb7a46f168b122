#include "fusefs/control_dir.h"

#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <sstream>

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
  return std::nullopt;
}

struct stat control_attr(InodeId id) {
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = id;
  st.st_uid = getuid();
  st.st_gid = getgid();
  if (id == kControlDirId) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
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
  o.field("files_cached", c.files_ready);
  o.field("copies_queued", s.copies_queued);
  o.field("copies_in_flight", c.staging_now);
  o.field("files_staged", c.files_staged);
  o.field("bytes_staged", c.bytes_staged);
  o.field("copies_aborted", c.staging_aborted);
  o.field("copies_dropped", s.copies_dropped);
  o.field("evictions", c.evictions);
  o.field("dropped_stale", c.dropped_stale);
  o.field("dropped_damaged", c.dropped_damaged);
  o.field("skipped_no_room", c.skipped_no_room);
  o.field("skipped_suspended", c.skipped_suspended);
  o.field("errors_no_space", c.errors_no_space);
  o.field("errors_io", c.errors_io);
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

std::string stats_json(const prefetch::EngineStats& s, const std::string& source, long pid) {
  std::ostringstream out;
  JsonObject o(out, 0);
  o.field("format", uint64_t{1});
  o.field("pid", static_cast<uint64_t>(pid));
  o.field("source", source);
  o.field("opens", s.opens);
  o.field("hits", s.hits);
  o.field("misses", s.misses);
  o.field("hit_rate", s.hits + s.misses == 0 ? 0.0 : double(s.hits) / double(s.hits + s.misses));
  o.field("bytes_from_cache", s.bytes_from_cache);
  o.field("bytes_from_source", s.bytes_from_source);
  o.field("source_version_checks", s.source_stats);
  o.field("files_known", s.files_known);
  cache_fields(o.start("cache"), s);
  o.close();
  out << "\n";
  return out.str();
}

}  // namespace epochfs::fusefs
