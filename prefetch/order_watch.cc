#include "prefetch/order_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstring>

#include <climits>

#include "cachestore/fs_type.h"
#include "cachestore/log.h"

namespace epochfs::prefetch {

using cachestore::FileVersion;
using cachestore::LogLevel;
using cachestore::Result;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {

// How often a file that inotify cannot watch is looked at, and how long a new version of it
// must stay the same before it is published.
constexpr int kPollMs = 1000;

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Result<std::unique_ptr<OrderWatch>> OrderWatch::start(const std::string& path,
                                                      NewUpload new_upload) {
  UniqueFd inotify(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!inotify.valid()) {
    return Status::error(errno, "inotify_init1");
  }
  const std::string dir = dir_of(path);
  if (inotify_add_watch(inotify.get(), dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
    return Status::error(errno, "--shuffle-file: watch " + dir);
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Status::error(errno, "eventfd");
  }
  int poll_ms = -1;
  struct statfs fs;
  const char* blind = ::statfs(dir.c_str(), &fs) == 0
                          ? cachestore::network_fs_name(static_cast<long>(fs.f_type))
                          : nullptr;
  if (blind != nullptr) {
    poll_ms = kPollMs;
    cachestore::log(LogLevel::kInfo,
                    "--shuffle-file: %s is on %s, where inotify misses changes made elsewhere: "
                    "looking at it every %d ms too",
                    dir.c_str(), blind, kPollMs);
  }
  return std::unique_ptr<OrderWatch>(
      new OrderWatch(path, std::move(new_upload), std::move(inotify), std::move(wake), poll_ms));
}

OrderWatch::OrderWatch(std::string path, NewUpload new_upload, UniqueFd inotify, UniqueFd wake,
                       int poll_ms)
    : path_(std::move(path)),
      name_(base_of(path_)),
      new_upload_(std::move(new_upload)),
      inotify_(std::move(inotify)),
      wake_(std::move(wake)),
      poll_ms_(poll_ms) {
  thread_ = std::thread([this] { run(); });
}

OrderWatch::~OrderWatch() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

void OrderWatch::run() {
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0) {
    publish_file();
  }
  alignas(inotify_event) char buf[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  while (true) {
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, poll_ms_);
    if (ready < 0 && errno != EINTR) {
      cachestore::log(LogLevel::kError, "--shuffle-file: poll: %s",
                      cachestore::error_text(errno).c_str());
      return;
    }
    if (ready == 0) {
      look_for_unseen_change();
      continue;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      return;
    }
    bool changed = false;
    ssize_t n;
    while ((n = ::read(inotify_.get(), buf, sizeof(buf))) > 0) {
      for (char* p = buf; p < buf + n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(p);
        // A lost event (queue overflow) may have been ours: look at the file again.
        changed |= (event->mask & IN_Q_OVERFLOW) != 0 || (event->len > 0 && name_ == event->name);
        p += sizeof(inotify_event) + event->len;
      }
    }
    if (changed) {
      publish_file();  // several events in one batch: the file is read once, as it is now
    }
  }
}

// A new version is published once it has stayed the same from one look to the next.
void OrderWatch::look_for_unseen_change() {
  struct stat st;
  if (::lstat(path_.c_str(), &st) != 0) {
    polled_version_ = {};
    return;
  }
  const auto version = FileVersion::of(st);
  if (version != last_version_ && version == polled_version_) {
    publish_file();
  }
  polled_version_ = version;
}

bool OrderWatch::seen(const FileVersion& version) {
  if (version == last_version_) {
    return true;
  }
  last_version_ = version;
  return false;
}

void OrderWatch::publish_file() {
  struct stat st;
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    // Said once per version of what is there, not at every event or look.
    const int err = fd.valid() ? EINVAL : errno;
    if (::lstat(path_.c_str(), &st) == 0 && seen(FileVersion::of(st))) {
      return;
    }
    cachestore::log(LogLevel::kWarning, "--shuffle-file %s: %s", path_.c_str(),
                    err == ELOOP    ? "is a symlink, which is not followed: rename a file onto it"
                    : err == EINVAL ? "not a regular file"
                                    : cachestore::error_text(err).c_str());
    return;
  }
  // The version read at start can also arrive as an event (written while the mount started):
  // publishing it twice would queue its epoch twice, or restart the current one.
  if (seen(FileVersion::of(st))) {
    return;
  }
  auto upload = new_upload_();
  char buf[1 << 16];
  uint64_t offset = 0;
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      cachestore::log(LogLevel::kWarning, "--shuffle-file %s: read: %s", path_.c_str(),
                      cachestore::error_text(errno).c_str());
      return;
    }
    if (n == 0) {
      break;
    }
    (void)upload->write(offset, std::string_view(buf, static_cast<size_t>(n)));
    offset += static_cast<uint64_t>(n);
  }
  upload->finish();  // logs and counts the verdict
}

}  // namespace epochfs::prefetch
