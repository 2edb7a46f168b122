// CacheStore, continued: a ready copy's pages read or asked for ahead of its reads (no pin, no
// access told to the eviction policy, nothing while the disk hangs).
#include <fcntl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>

#include "cachestore/cache_store.h"

namespace epochfs::cachestore {

void CacheStore::read_in(FileId id) {
  uint64_t bytes = 0;
  {
    MutexLock lock(mu_);
    const Entry* e = entries_.find(id);
    if (e == nullptr || e->state() != State::kReady || e->doomed) {
      return;
    }
    bytes = e->size();
  }
  if (!dev_null_.valid() || disk_hung()) {
    return;
  }
  const std::string name = object_name_of(id);
  // Unpinned: if the copy is evicted meanwhile, the open fails or reads pages no one will ask
  // for; either costs nothing but the read.
  const DiskWatch::Op op = watch_.begin();
  const UniqueFd fd = open_object(name);
  if (!fd.valid()) {
    return;
  }
  // Into /dev/null: the pages are read into the page cache and copied nowhere.
  off_t off = 0;
  while (static_cast<uint64_t>(off) < bytes) {
    if (::sendfile(dev_null_.get(), fd.get(), &off, bytes - static_cast<uint64_t>(off)) <= 0) {
      return;
    }
  }
  read_aheads_.fetch_add(1, std::memory_order_relaxed);
}

void CacheStore::read_ahead(int fd, uint64_t bytes) {
  // The kernel reads at most max(the disk's largest request, its readahead window) per call
  // (often 128 KiB): in pieces that size, or most of a 1 MiB block would stay unread.
  constexpr uint64_t kPiece = 128 << 10;
  if (disk_hung()) {
    return;
  }
  const DiskWatch::Op op = watch_.begin();  // it may wait for room in the disk's queue
  for (uint64_t off = 0; off < bytes; off += kPiece) {
    if (::posix_fadvise(fd, static_cast<off_t>(off),
                        static_cast<off_t>(std::min(kPiece, bytes - off)),
                        POSIX_FADV_WILLNEED) != 0) {
      return;
    }
  }
  read_aheads_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace epochfs::cachestore
