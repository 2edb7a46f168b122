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
             cachestore::UniqueFd wake);
  void run();
  void publish_file();

  const std::string path_;
  const std::string name_;  // the file's name within its directory
  NewUpload new_upload_;
  cachestore::UniqueFd inotify_;
  cachestore::UniqueFd wake_;
  cachestore::FileVersion last_version_;  // of the version published last (thread_ only)
  std::thread thread_;
};

}  // namespace epochfs::prefetch
