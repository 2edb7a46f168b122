// HandleTable<T>: owns the handles of open files or directories between open and release.
//
// The kernel normally sends RELEASE for every OPEN, but not when the connection ends first
// (a lazy unmount whose last user closes, an aborted connection). Owning handles here, rather
// than only through fuse_file_info::fh, lets the Filesystem free them at shutdown.
//
// Thread-safety: mu_ is a leaf lock, held for the map operation only.
#pragma once

#include <memory>
#include <new>
#include <unordered_map>

#include "cachestore/sync.h"

namespace epochfs::fusefs {

template <typename T>
class HandleTable {
 public:
  // Takes ownership; returns the raw pointer to hand to the kernel as fh.
  T* add(std::unique_ptr<T> handle) {
    T* raw = handle.get();
    cachestore::MutexLock lock(mu_);
    handles_.emplace(raw, std::move(handle));
    return raw;
  }

  // add() that never throws: null if out of memory, and handle then still owns what it held,
  // so that the caller can undo what the handle stands for (a pinned cached copy).
  T* try_add(std::unique_ptr<T>& handle) noexcept {
    T* raw = handle.get();
    try {
      cachestore::MutexLock lock(mu_);
      // Placed empty, then filled: whatever allocation throws, handle was not moved.
      handles_.emplace(raw, nullptr).first->second = std::move(handle);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    return raw;
  }

  // Frees a handle the kernel released. Unknown pointers are ignored.
  void remove(T* handle) {
    std::unique_ptr<T> doomed;  // destroyed (closing its fd) after the lock is released
    {
      cachestore::MutexLock lock(mu_);
      auto it = handles_.find(handle);
      if (it != handles_.end()) {
        doomed = std::move(it->second);
        handles_.erase(it);
      }
    }
  }

  size_t size() const {
    cachestore::MutexLock lock(mu_);
    return handles_.size();
  }

 private:
  mutable cachestore::Mutex mu_;
  std::unordered_map<T*, std::unique_ptr<T>> handles_ GUARDED_BY(mu_);
};

}  // namespace epochfs::fusefs
