// The control directory: <mount>/.epochfs, a virtual directory for talking to the daemon.
//
// It is found by lookup but not listed by readdir of the root, so `ls` and dataset scanners
// never see it. A real ".epochfs" in the source is shadowed. Today it holds `stats`, a
// read-only JSON snapshot taken when the file is opened (docs/stats.md), `metrics`, the same
// figures in Prometheus's text format (fusefs/metrics.h), and `verify`: opening it checks
// every cached copy against its hash and gives the result as JSON (epochfs verify); only root
// and the daemon's user may, one run at a time (Filesystem::verify_document).
// Writing a new file into it publishes a shuffle order (or, named `manifest`, a manifest); the
// close reports whether it was published. Its
// nodes have fixed ids far above any the InodeTable hands out, and the kernel's references to them
// need no counting: they live as long as the mount.
//
// Thread-safety: pure functions.
#pragma once

#include <sys/stat.h>

#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "fusefs/inode_table.h"
#include "fusefs/metrics.h"
#include "prefetch/engine.h"
#include "prefetch/order_parser.h"

namespace epochfs::fusefs {

using prefetch::kControlDirName;
inline constexpr InodeId kControlDirId = InodeId{1} << 62;
inline constexpr InodeId kStatsFileId = kControlDirId + 1;
inline constexpr InodeId kVerifyFileId = kControlDirId + 2;
inline constexpr InodeId kMetricsFileId = kControlDirId + 3;

// Files being written into the control directory (orders, manifests) get ids from here up.
inline constexpr InodeId kUploadIdBase = kControlDirId + 1024;
// Snapshots of control files (--data-path no-open: Filesystem::control_file_attr) from here up.
inline constexpr InodeId kSnapshotIdBase = kControlDirId + (InodeId{1} << 40);
// The name under which a written file is a manifest; any other new name is an order.
inline constexpr char kManifestName[] = "manifest";

inline bool is_control(InodeId id) { return id >= kControlDirId; }

inline bool is_upload(InodeId id) { return id >= kUploadIdBase && id < kSnapshotIdBase; }

// The control node named `name` in directory `parent`, if there is one.
std::optional<InodeId> control_lookup(InodeId parent, std::string_view name);

// Attributes of a control node. uid/gid: the daemon's.
struct stat control_attr(InodeId id);

// The names in the control directory.
inline constexpr const char* kControlEntries[] = {"stats", "verify", "metrics"};
inline constexpr size_t kControlEntryCount = std::size(kControlEntries);

// True for the control files above (stats, verify, metrics), by their fixed ids.
inline bool is_control_file(InodeId id) {
  return id >= kStatsFileId && id < kStatsFileId + kControlEntryCount;
}

// What user viewer may see of stats: their own streams and latest publish; of other users'
// only how many streams they hold. Root and the mount's owner see everything.
prefetch::EngineStats as_seen_by(prefetch::EngineStats stats, uid_t viewer);

// The JSON document served as .epochfs/verify.
std::string verify_json(const cachestore::VerifyReport& report, bool cache_enabled);

// The JSON document served as .epochfs/stats.
// implicit_opens: the mount runs with --data-path no-open.
// inodes: the entries the kernel holds references to now.
// verify: how .epochfs/verify has been used (Filesystem::verify_document).
// requests: the kernel's requests answered, by kind.
// data_path: how reads are served; implicit_opens: the mount is no-open's (it then says so).
std::string stats_json(const prefetch::EngineStats& stats, const std::string& source, long pid,
                       uint64_t inodes, const DataPathFigures& data_path,
                       bool implicit_opens = false, const VerifyFigures& verify = {},
                       const RequestFigures& requests = {});

}  // namespace epochfs::fusefs
