// CacheStore, continued: verify (epochfs verify), which reads every ready copy whole and
// checks it against the hash recorded when it was staged; a damaged one is dropped.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "cachestore/cache_store.h"
#include "cachestore/copy.h"
#include "cachestore/log.h"

namespace epochfs::cachestore {

VerifyReport CacheStore::verify_all() {
  std::vector<FileId> ids;
  {
    MutexLock lock(mu_);
    // Called by for_each within this scope, with mu_ held.
    entries_.for_each([&](FileId id, const Entry& e) NO_THREAD_SAFETY_ANALYSIS {
      if (e.state() == State::kReady && !e.doomed) {
        ids.push_back(id);
      }
    });
  }
  VerifyReport report;
  {
    MutexLock lock(mu_);
    counters_.verify_checked = 0;
    counters_.verify_total = ids.size();
  }
  for (FileId id : ids) {
    std::string name;
    uint64_t size = 0;
    uint64_t expected = 0;
    {
      MutexLock lock(mu_);
      Entry* e = entries_.find(id);
      // Evicted or dropped since the list was made: done with. A copy kMaxPins readers have
      // open is left unchecked rather than read unpinned.
      if (e == nullptr || e->state() != State::kReady || e->doomed || !e->pin()) {
        ++counters_.verify_checked;
        continue;
      }
      size = e->size();
      expected = e->hash;
    }
    name = object_name_of(id);
    UniqueFd fd = open_object(name);
    struct stat st;
    bool good = fd.valid() && ::fstat(fd.get(), &st) == 0 && is_object(st, size);
    if (good) {
      auto actual = hash_fd(fd.get(), size);
      good = actual.is_ok() && actual.value() == expected;
    }
    {
      MutexLock lock(mu_);
      Entry* e = entries_.find(id);
      ++report.checked;
      ++counters_.verify_checked;
      report.bytes += size;
      if (!good && e != nullptr) {
        e->doomed = true;
        ++counters_.dropped_damaged;
        ++report.damaged;
      } else if (e != nullptr) {
        e->verify_pending = false;
        kept_versions_.erase(id);
      }
    }
    if (!good) {
      log(LogLevel::kWarning, "cache: copy %s is damaged; dropped", name.c_str());
      report.dropped.push_back(id);
    }
    unpin(id);  // removes the copy if it was found damaged
  }
  return report;
}

}  // namespace epochfs::cachestore
