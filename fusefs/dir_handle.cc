#include "fusefs/dir_handle.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>

namespace epochfs::fusefs {

using cachestore::Result;
using cachestore::Status;

namespace {

struct DirCloser {
  void operator()(DIR* dir) const { ::closedir(dir); }
};

}  // namespace

Result<Listing> Listing::read(const cachestore::RootDir& source, const std::string& rel) {
  auto fd = source.open_at(rel, O_RDONLY | O_DIRECTORY);
  if (!fd.is_ok()) {
    return fd.status();
  }
  std::unique_ptr<DIR, DirCloser> dir(::fdopendir(fd.value().get()));
  if (!dir) {
    return Status::error(errno, "opendir " + rel);
  }
  fd.value().release();  // the DIR* owns it now
  Listing listing;
  for (;;) {
    errno = 0;
    // readdir is safe on a stream no other thread uses (glibc); the check cannot tell.
    struct dirent* d = ::readdir(dir.get());  // NOLINT(concurrency-mt-unsafe)
    if (d == nullptr) {
      if (errno != 0) {
        return Status::error(errno, "readdir " + rel);
      }
      return listing;
    }
    listing.entries_.push_back(Entry{listing.names_.size(), d->d_ino, d->d_type});
    listing.names_.append(d->d_name);
    listing.names_.push_back('\0');
  }
}

DirEntry Listing::at(size_t i) const {
  const Entry& e = entries_[i];
  return DirEntry{names_.data() + e.name, e.ino, e.type, static_cast<off_t>(i + 1)};
}

std::optional<DirEntry> DirHandle::next() {
  if (position_ >= listing_->size()) {
    return std::nullopt;
  }
  return listing_->at(position_++);
}

void Listings::keep(const std::string& path, std::shared_ptr<const Listing> listing) {
  cachestore::MutexLock lock(mu_);
  auto it = by_path_.find(path);
  const size_t old = it == by_path_.end() ? 0 : it->second->size();
  if (entries_ - old + listing->size() > kMaxEntries) {
    return;
  }
  entries_ = entries_ - old + listing->size();
  by_path_[path] = std::move(listing);
}

std::shared_ptr<const Listing> Listings::find(const std::string& path) const {
  cachestore::MutexLock lock(mu_);
  auto it = by_path_.find(path);
  return it == by_path_.end() ? nullptr : it->second;
}

}  // namespace epochfs::fusefs
