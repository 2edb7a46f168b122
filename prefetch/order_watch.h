// OrderWatch: publishes the shuffle file named by --shuffle-file each time a new version of it
// appears.
//
// The file lives outside the mount. A watch on its directory (inotify) sees a writer close it
// (IN_CLOSE_WRITE) or a new version renamed onto its name (IN_MOVED_TO, the atomic replace
// training scripts should use); each such event reads the whole file through an OrderUpload,
// the same parser and rules as a file written into <mount>/.epochfs/. The version present at
// start is published at once. Watching the directory, not the file, keeps working across
// renames, which replace the file's inode.
//
// inotify sees only changes made through this machine's kernel. On a network or FUSE
// filesystem (NFS, Lustre, ...) the file is also looked at every second, and a new version is
// published once it has stayed the same for that long: a writer on another machine gives no
// close event, and reading it mid-write would publish part of an order (#count guards that).
// A symlink at the path is not followed: the daemon may run as root and publishing a file
// named by whoever could write the directory would show its lines in the stats.
//
// Thread-safety: one thread of its own, started by the constructor and joined by the
// destructor (woken through an eventfd).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cachestore/file_version.h"
#include "cachestore/status.h"
#include "cachestore/unique_fd.h"
#include "prefetch/order_upload.h"

namespace epochfs::prefetch {

class OrderWatch {
 public:
  using NewUpload = std::function<std::unique_ptr<OrderUpload>()>;

  // Watches path; new_upload makes the upload each version is read into.
  static cachestore::Result<std::unique_ptr<OrderWatch>> start(const std::string& path,
                                                               NewUpload new_upload);
  ~OrderWatch();
  OrderWatch(const OrderWatch&) = delete;
  OrderWatch& operator=(const OrderWatch&) = delete;

 private:
  OrderWatch(std::string path, NewUpload new_upload, cachestore::UniqueFd inotify,
             cachestore::UniqueFd wake, int poll_ms);
  void run();
  void publish_file();
  void look_for_unseen_change();
  // Whether version is the one published (or refused) last; remembers it if not.
  bool seen(const cachestore::FileVersion& version);

  const std::string path_;
  const std::string name_;  // the file's name within its directory
  NewUpload new_upload_;
  cachestore::UniqueFd inotify_;
  cachestore::UniqueFd wake_;
  const int poll_ms_;  // -1: inotify sees every change
  // thread_ only: the version published or refused last, and the one the last poll found.
  cachestore::FileVersion last_version_;
  cachestore::FileVersion polled_version_;
  std::thread thread_;
};

}  // namespace epochfs::prefetch
