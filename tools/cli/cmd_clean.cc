// `epochfs clean`: removes what dead mounts left in a cache directory, for a Slurm epilog or a
// cron job. The search is the mounts' own (cachestore/leftovers.h): a live mount's directory
// (its lock held) and anything not named like epochfs's are never touched.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <string>

#include "cachestore/leftovers.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/progress.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

const char* describe(const cachestore::Leftover& l) {
  switch (l.entry.kind) {
    case cachestore::CacheDirKind::kMount:
      return l.entry.index_mtime_s >= 0 ? "dead mount, kept cache" : "dead mount";
    case cachestore::CacheDirKind::kBuilding:
      return "unfinished";
    case cachestore::CacheDirKind::kTrash:
      return "removal cut short";
  }
  return "";
}

}  // namespace

int cmd_clean(const CleanOptions& o) {
  const std::string root = absolute_path(o.cache_dir);
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      printf("%s does not exist: nothing to clean\n", root.c_str());
      return 0;
    }
    fprintf(stderr, "epochfs: --cache-dir %s: %s\n", root.c_str(), strerror(errno));
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "epochfs: --cache-dir %s: not a directory\n", root.c_str());
    return 1;
  }
  const char* verb = o.dry_run ? "would remove" : "removed";
  uint64_t total_bytes = 0;
  size_t count = 0;
  int failed = 0;
  Progress progress;  // removing a million copies takes minutes
  // Each is held (its lock taken) from the search to its removal: no mount adopts it meanwhile.
  for (const cachestore::Leftover& l : cachestore::find_dead_cache_dirs(root)) {
    const uint64_t bytes = cachestore::disk_bytes(root, l.entry.name);
    const std::string size = human_bytes(static_cast<double>(bytes));
    if (!o.dry_run) {
      progress.show("removing " + root + "/" + l.entry.name + " (" + size + ")...", true);
      cachestore::Status s = cachestore::remove_leftover(root, l);
      progress.clear();
      if (!s.is_ok()) {
        printf("cannot remove %s/%s (%s): %s\n", root.c_str(), l.entry.name.c_str(), describe(l),
               s.to_string().c_str());
        ++failed;
        continue;
      }
    }
    printf("%-12s %10s  %s/%s (%s)\n", verb, size.c_str(), root.c_str(), l.entry.name.c_str(),
           describe(l));
    total_bytes += bytes;
    ++count;
  }
  printf("%s %zu %s of dead mounts, %s\n", verb, count, count == 1 ? "directory" : "directories",
         human_bytes(static_cast<double>(total_bytes)).c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace epochfs::tools
