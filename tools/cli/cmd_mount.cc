// `epochfs mount`: check what a user can get wrong, with a one-line reason each, then mount.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "cachestore/log.h"
#include "cachestore/unique_fd.h"
#include "fusefs/session.h"
#include "tools/cli/cache_room.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::tools {
namespace {

__attribute__((format(printf, 1, 2))) bool fail(const char* fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  fprintf(stderr, "epochfs: %s\n", line);
  return false;
}

bool check_fuse_device() {
  cachestore::UniqueFd fd(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    return fail("cannot open /dev/fuse: %s", strerror(errno));
  }
  return true;
}

bool check_source(const std::string& source) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) {
    return fail("source %s: %s", source.c_str(), strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail("source %s is not a directory", source.c_str());
  }
  cachestore::UniqueFd fd(::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return fail("source %s is not readable: %s", source.c_str(), strerror(errno));
  }
  return true;
}

// A mount whose daemon died answers every call with ENOTCONN until it is detached. If it is an
// epochfs mount, nothing can still be served through it, so detaching it loses nothing: do it
// and mount again in its place. Someone else's dead mount is left to its owner.
bool recover_stale_mount(const std::string& mountpoint) {
  const auto type = mount_type_at(mountpoint);
  if (!type || *type != "fuse.epochfs") {
    return fail("%s is a stale mount whose daemon died (%s); run: umount -l %s", mountpoint.c_str(),
                type ? type->c_str() : "unknown type", mountpoint.c_str());
  }
  if (!detach_mount(mountpoint)) {
    return fail(
        "%s is a stale mount whose daemon died, and detaching it failed: %s; run: "
        "epochfs unmount --lazy %s",
        mountpoint.c_str(), strerror(errno), mountpoint.c_str());
  }
  fprintf(stderr, "epochfs: %s was a stale mount whose daemon died; detached it\n",
          mountpoint.c_str());
  return true;
}

bool check_mountpoint(const std::string& mountpoint) {
  if (is_dead_mount(mountpoint) && !recover_stale_mount(mountpoint)) {
    return false;
  }
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return fail("mountpoint %s: %s", mountpoint.c_str(), strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail("mountpoint %s is not a directory", mountpoint.c_str());
  }
  if (auto type = mount_type_at(mountpoint)) {
    return fail("%s is already a mount point (%s)", mountpoint.c_str(), type->c_str());
  }
  std::error_code ec;
  if (!std::filesystem::is_empty(mountpoint, ec) && !ec) {
    return fail(
        "mountpoint %s is not empty: the mount would hide its files; empty it or pick "
        "another directory",
        mountpoint.c_str());
  }
  return true;
}

// True if path is dir or below it, symlinks resolved as far as the paths exist.
bool is_within(const std::string& path, const std::string& dir) {
  std::error_code ec;
  const std::string p = std::filesystem::weakly_canonical(path, ec).string();
  const std::string d = std::filesystem::weakly_canonical(dir, ec).string();
  return p == d || p.rfind(d + "/", 0) == 0;
}

// A mountpoint inside the source would show the mount inside itself: every walk of the tree
// (find, a listing, the daemon's own stat of the directory) would loop back into the daemon.
// Copies inside the source would be served as part of the dataset (and written to shared
// storage); inside the mountpoint they would vanish under the mount.
bool check_places(const fusefs::MountOptions& o) {
  if (is_within(o.mountpoint, o.source)) {
    return fail("mountpoint %s is inside the source %s: mount it elsewhere", o.mountpoint.c_str(),
                o.source.c_str());
  }
  if (o.cache.capacity_bytes == 0) {
    return true;
  }
  if (is_within(o.cache.root, o.source)) {
    return fail("--cache-dir %s is inside the source %s: put it on a local disk outside it",
                o.cache.root.c_str(), o.source.c_str());
  }
  if (is_within(o.cache.root, o.mountpoint)) {
    return fail("--cache-dir %s is inside the mountpoint %s: the mount would hide it",
                o.cache.root.c_str(), o.mountpoint.c_str());
  }
  return true;
}

// A --cache-size above what the cache's filesystem can ever hold is not refused (the free-space
// reserve bounds the cache), but the user expected that much space: say so.
void warn_if_cache_too_big(const cachestore::CacheOptions& c) {
  if (c.capacity_bytes == 0 || c.capacity_bytes == UINT64_MAX) {
    return;
  }
  const auto room = cache_room(c.root, c.reserve_fraction);
  if (room && static_cast<double>(c.capacity_bytes) > room->holds()) {
    fprintf(stderr,
            "epochfs: warning: --cache-size %s is more than %s can hold (%s, keeping the %.0f%% "
            "reserve free): the reserve will bound the cache\n",
            human_bytes(static_cast<double>(c.capacity_bytes)).c_str(), room->dir.c_str(),
            human_bytes(room->holds()).c_str(), c.reserve_fraction * 100);
  }
}

}  // namespace

int cmd_mount(fusefs::MountOptions options) {
  // The daemon changes its directory to /, so relative paths must be resolved now.
  options.source = absolute_path(options.source);
  options.mountpoint = absolute_path(options.mountpoint);
  // The cache key names the dataset however it was reached (symlinks, ..).
  char real[PATH_MAX];
  options.cache.source_key =
      ::realpath(options.source.c_str(), real) != nullptr ? std::string(real) : options.source;
  if (options.cache.capacity_bytes > 0) {
    options.cache.root = absolute_path(options.cache.root);
  }
  if (!check_source(options.source) || !check_mountpoint(options.mountpoint) ||
      !check_places(options) || !check_fuse_device()) {
    return 1;
  }
  warn_if_cache_too_big(options.cache);
  if (options.debug) {
    options.foreground = true;
  }
  if (!options.log_file.empty()) {
    options.log_file = absolute_path(options.log_file);
    if (!cachestore::open_log_file(options.log_file)) {
      fail("--log-file %s: %s", options.log_file.c_str(), strerror(errno));
      return 1;
    }
  }
  const int rc = fusefs::run_mount(options);
  // After the Filesystem is gone: its cleanup may still log.
  cachestore::stop_log_flusher();
  return rc;
}

}  // namespace epochfs::tools
