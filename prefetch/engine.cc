#include "prefetch/engine.h"

#include <errno.h>
#include <fcntl.h>

namespace epochfs::prefetch {

using cachestore::Result;
using cachestore::Status;

Result<OpenFile> Engine::open_file(const std::string& rel_path) const {
  // O_NONBLOCK: opening a FIFO that slipped in where a file was must not hang a worker.
  auto fd = source_.open_at(rel_path, O_RDONLY | O_NONBLOCK);
  if (!fd.is_ok()) {
    return fd.status();
  }
  auto st = cachestore::fstat_fd(fd.value().get(), rel_path);
  if (!st.is_ok()) {
    return st.status();
  }
  if (!S_ISREG(st.value().st_mode)) {
    return Status::error(S_ISDIR(st.value().st_mode) ? EISDIR : EINVAL, "open " + rel_path);
  }
  return OpenFile{std::move(fd).value(), st.value()};
}

}  // namespace epochfs::prefetch
