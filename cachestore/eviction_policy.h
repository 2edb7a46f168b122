// EvictionPolicy: which cached file to drop when room is needed, and which to admit.
//
// Policies are plain classes: no I/O and no locks. The CacheStore owns one, calls it under its
// own lock, and feeds it every event (a file became resident, was hit, was removed). Tests feed
// them traces directly. (RocksDB cache/lru_cache.h: "This class is not thread-safe".)
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>

namespace epochfs::cachestore {

// Dense id of a source file, assigned by the prefetch engine for the life of a mount.
using FileId = uint32_t;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // id became resident (its copy is ready).
  virtual void inserted(FileId id) = 0;
  // A reader hit id.
  virtual void accessed(FileId id) = 0;
  // id left the cache (evicted, dropped as stale or damaged).
  virtual void removed(FileId id) = 0;

  // The resident file to evict next among those can_evict accepts (pinned files are refused),
  // or nullopt if there is none.
  virtual std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) = 0;

  // Whether a file not yet cached should be copied in at all.
  virtual bool admit(FileId /*id*/) { return true; }

  // Number of resident files the policy tracks.
  virtual size_t size() const = 0;
};

// Least recently used: evicts the file whose last insert or hit is oldest. What cachefilesd
// and rclone's VFS cache do; the baseline for the known-future policy.
class LruPolicy final : public EvictionPolicy {
 public:
  void inserted(FileId id) override { touch(id); }

  void accessed(FileId id) override {
    if (where_.count(id) != 0) {
      touch(id);
    }
  }

  void removed(FileId id) override;
  std::optional<FileId> choose_victim(const std::function<bool(FileId)>& can_evict) override;

  size_t size() const override { return order_.size(); }

 private:
  void touch(FileId id);

  std::list<FileId> order_;  // front: most recent
  std::unordered_map<FileId, std::list<FileId>::iterator> where_;
};

}  // namespace epochfs::cachestore
