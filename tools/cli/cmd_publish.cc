// epochfs publish: sends a shuffle file (or a manifest) to a mount through its control
// directory, the same channel a training script writing into <mount>/.epochfs/ uses.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

// The header lines that carry the command line's overrides. The parser takes the first of
// each directive, so these win over the file's own.
std::string override_header(const PublishOptions& o) {
  std::string header;
  if (o.epoch) {
    header += "#epoch " + std::to_string(*o.epoch) + "\n";
  }
  if (!o.stream.empty()) {
    header += "#stream " + o.stream + "\n";
  }
  return header + "#line 1\n";  // the file's own line numbers in the reports
}

// The daemon looked up a few of the order's entries in the source and says whether most name
// no file the publisher can read (docs/stats.md, prefetch.last_publish.mostly_missing).
bool mostly_missing(const std::optional<StatsDoc>& stats) {
  return stats && stats->is_true("prefetch.last_publish.mostly_missing");
}

int warn_missing(const std::string& mountpoint, const PublishOptions& o) {
  fprintf(stderr,
          "epochfs: %s: %s: most entries name no file in the mount's source that you can read; "
          "paths are relative to the mount's root (%s/<path> is the file), or absolute inside "
          "it\n",
          o.strict ? "error" : "warning", o.file.c_str(), mountpoint.c_str());
  return o.strict ? 1 : 0;
}

}  // namespace

int cmd_publish(const PublishOptions& o) {
  const std::string mountpoint = absolute_path(o.mountpoint);
  cachestore::UniqueFd in(::open(o.file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) {
    fprintf(stderr, "epochfs: %s: %s\n", o.file.c_str(), strerror(errno));
    return 1;
  }
  const std::string target =
      mountpoint + "/.epochfs/" +
      (o.manifest ? std::string("manifest") : "order." + std::to_string(::getpid()));
  cachestore::UniqueFd out(::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out.valid()) {
    fprintf(stderr, "epochfs: %s is not an epochfs mount (cannot create %s: %s)\n",
            mountpoint.c_str(), target.c_str(), strerror(errno));
    return 1;
  }
  bool ok = cachestore::write_all(out.get(), override_header(o), target).is_ok();
  char buf[1 << 16];
  ssize_t n;
  while (ok && (n = ::read(in.get(), buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) {
      continue;
    }
    ok = n > 0 &&
         cachestore::write_all(out.get(), std::string_view(buf, static_cast<size_t>(n)), target)
             .is_ok();
  }
  // fsync publishes, and fails when the daemon refused the order; the close would too, but
  // with --data-path no-open a close does not reach the daemon.
  const bool synced = ok && ::fsync(out.get()) == 0;
  const int closed = ::close(out.release());
  auto stats = read_stats(mountpoint);
  const std::string message =
      stats ? stats->values["prefetch.last_publish.message"] : std::string("no report");
  if (!synced || closed != 0) {
    fprintf(stderr, "epochfs: %s: %s\n", o.file.c_str(), message.c_str());
    return 1;
  }
  printf("%s\n", message.c_str());
  return mostly_missing(stats) ? warn_missing(mountpoint, o) : 0;
}

}  // namespace epochfs::tools
