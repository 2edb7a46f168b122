// CacheStore, continued: copies that outlive a mount (--keep-cache). The index of ready copies
// is written at a clean unmount, read and deleted at the next mount, which adopts what it
// vouches for and checks each one against its hash at its first open.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachestore/cache_store.h"
#include "cachestore/copy.h"
#include "cachestore/index_file.h"
#include "cachestore/log.h"
#include "cachestore/trusted_path.h"

namespace epochfs::cachestore {

// The index is written only at a clean shutdown and deleted as soon as it is read: after a
// crash there is no index, and nothing unverified is ever trusted.
void CacheStore::save_index() {
  struct Ready {
    FileId id;
    Entry entry;
    std::optional<FileVersion> kept;  // its version in the index it came from, if not opened
  };

  std::vector<Ready> ready;
  {
    MutexLock lock(mu_);
    // Called by for_each within this scope, with mu_ held.
    entries_.for_each([&](FileId id, const Entry& e) NO_THREAD_SAFETY_ANALYSIS {
      if (e.state() == State::kReady && !e.doomed) {
        ready.push_back(Ready{id, e, e.verify_pending ? kept_versions_.get(id) : std::nullopt});
      }
    });
  }
  // Paths and versions from the registry, with no lock of ours held. A file seen since is
  // kept at the version seen, if it is still the copy's.
  std::vector<KeptCopy> copies;
  for (const auto& r : ready) {
    auto version = version_of_ ? version_of_(r.id) : std::nullopt;
    version = version ? version : r.kept;
    std::string path = path_of_ ? path_of_(r.id) : std::string();
    if (version && r.entry.is_of(*version) && !path.empty()) {
      copies.push_back(KeptCopy{std::move(path), r.entry.size(), *version, r.entry.hash});
    }
  }
  const std::string text = format_index(copies);
  const std::string temp = std::string(CacheDir::kIndexName) + ".tmp";
  UniqueFd fd(::openat(dir_->fd(), temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() ||
      ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::renameat(dir_->fd(), temp.c_str(), dir_->fd(), CacheDir::kIndexName) != 0) {
    log(LogLevel::kWarning, "cache: cannot write the index of %s; the next mount starts empty",
        dir_->path().c_str());
    return;
  }
  log(LogLevel::kInfo, "cache: kept %zu copies in %s", copies.size(), dir_->path().c_str());
}

void CacheStore::load_index() {
  std::string text;
  {
    UniqueFd fd(::openat(dir_->fd(), CacheDir::kIndexName, O_RDONLY | O_CLOEXEC));
    char buf[65536];
    ssize_t n;
    while (fd.valid() && (n = ::read(fd.get(), buf, sizeof(buf))) > 0) {
      text.append(buf, static_cast<size_t>(n));
    }
  }
  ::unlinkat(dir_->fd(), CacheDir::kIndexName, 0);
  auto copies = parse_index(text);
  if (!copies) {
    log(LogLevel::kWarning, "cache: the kept index in %s is damaged; starting empty",
        dir_->path().c_str());
    copies.emplace();
  }
  // Keep what the index vouches for and is still there whole; remove everything else
  // (temporary files of a copy cut short, copies the index does not know).
  std::unordered_map<std::string, KeptCopy> wanted;
  for (auto& c : *copies) {
    wanted.emplace(CacheDir::object_name(c.path), std::move(c));
  }
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir_->path(), ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() == 0 || std::filesystem::is_directory(it->symlink_status(ec))) {
      continue;  // the lock file, the index and the fan-out directories
    }
    const std::string name = std::filesystem::relative(it->path(), dir_->path()).string();
    auto w = wanted.find(name);
    // Not followed if a link. A copy another user could write might change after its check.
    struct stat st;
    const bool trusted = ::fstatat(dir_->fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                         trusted_copy(st, ::geteuid());
    // A copy of a version has that version's size: an index saying otherwise is damaged.
    if (trusted && w != wanted.end() && static_cast<uint64_t>(st.st_size) == w->second.size &&
        w->second.version.size == static_cast<int64_t>(w->second.size)) {
      kept_.push_back(std::move(w->second));
      wanted.erase(w);
    } else {
      ::unlinkat(dir_->fd(), name.c_str(), 0);
    }
  }
}

void CacheStore::adopt(FileId id, const KeptCopy& copy) {
  const uint64_t charge = charge_for(copy.size);
  {
    MutexLock lock(mu_);
    if (!entries_.contains(id) && copy.size <= Entry::kMaxBytes &&
        used_bytes_ + charge <= options_.capacity_bytes) {
      used_bytes_ += charge;
      entries_.insert(id, Entry(State::kReady, copy.size, copy.version.digest(), copy.hash, true));
      kept_versions_.set(id, copy.version);
      policy_->inserted(id);
      return;
    }
  }
  // No room under the capacity of this mount.
  ::unlinkat(dir_->fd(), CacheDir::object_name(copy.path).c_str(), 0);
}

// A copy kept by an earlier mount is read whole and hashed once, at its first open, before it
// is served: the mount that wrote it did not fsync, and the disk may have changed since.
bool CacheStore::verify_copy(FileId id, int fd) {
  uint64_t expected;
  uint64_t size;
  {
    MutexLock lock(mu_);
    const Entry* e = entries_.find(id);
    if (e == nullptr || !e->verify_pending) {
      return true;
    }
    expected = e->hash;
    size = e->size();
  }
  auto actual = hash_fd(fd, size);
  MutexLock lock(mu_);
  Entry* e = entries_.find(id);
  if (actual.is_ok() && actual.value() == expected && e != nullptr) {
    e->verify_pending = false;
    kept_versions_.erase(id);
    return true;
  }
  return false;
}

}  // namespace epochfs::cachestore
