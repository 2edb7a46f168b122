// Schedule, continued: range orders' blocks, thinned at publish and advanced by the bytes
// their READs fetch (see "Range orders" in schedule.h).
#include <algorithm>
#include <array>
#include <unordered_map>

#include "prefetch/blocks.h"
#include "prefetch/schedule.h"

namespace epochfs::prefetch {

static_assert(uint64_t{Schedule::kMaxUses} * Schedule::kUseUnits <= UINT32_MAX,
              "an entry's credit fits");

// The first of each of 15 equal shares of a block's occurrences is kept, and the last, which
// ends the block's epoch.
std::vector<uint32_t> Schedule::thin_repeats(std::vector<FileId>& entries) {
  struct Count {
    uint64_t total = 0;
    uint64_t seen = 0;
    size_t last_kept = 0;
  };

  // Counted in a map: a range order names few distinct blocks (a file's size over 1 MiB), and
  // a vector by id would cost 4 bytes per file the mount knows.
  std::unordered_map<FileId, Count> counts;
  for (FileId id : entries) {
    ++counts[id].total;
  }
  const uint64_t shares = kMaxRepeats - 1;
  std::vector<uint32_t> uses;
  size_t kept = 0;
  for (FileId id : entries) {
    Count& c = counts[id];
    const uint64_t j = c.seen++;
    const uint64_t n = c.total;
    if (n <= kMaxRepeats || j == 0 || j == n - 1 || j * shares / n != (j - 1) * shares / n) {
      c.last_kept = kept;
      uses.push_back(1);
      entries[kept++] = id;
    } else if (uses[c.last_kept] < kMaxUses) {
      ++uses[c.last_kept];
    }
  }
  entries.resize(kept);
  return uses;
}

std::optional<Schedule::Match> Schedule::on_block_read(FileId file, uint64_t bytes, bool fresh,
                                                       std::optional<uint32_t> opener) {
  const std::optional<Place> first = first_credited(file, opener);
  if (!first) {
    return on_open(file, opener);
  }
  Epoch& e = *first->epoch;
  const size_t stream = e.stream;
  Stream& s = streams_[stream];
  // The file's entries in e (an epoch's occurrences are linked one after another; a range
  // order's are thinned to kMaxRepeats), and the uses they stand for.
  std::array<size_t, kMaxRepeats> mine{};
  size_t count = 0;
  uint64_t uses = 0;
  for (uint64_t gid = e.gid + first->index; gid != kNoGid && count < mine.size();) {
    const Place p = place_of(gid);
    if (p.epoch != &e) {
      break;
    }
    mine[count++] = p.index;
    uses += e.credits[p.index].uses;
    gid = next_gid(gid, e.slots[p.index]);
  }
  uint64_t want = std::min<uint64_t>(bytes, kBlockBytes) * uses * kUseUnits / kBlockBytes;
  want = fresh ? std::max<uint64_t>(want, kUseUnits) : want;
  if (want == 0) {
    return Match{stream, false, false, false};  // a sliver of a READ centred in another block
  }
  bool consumed = false;
  for (size_t k = 0; k < count; ++k) {
    const size_t index = mine[k];
    if ((e.slots[index].link & kConsumed) == 0) {
      if (want < kUseUnits) {
        return Match{stream, false, false, consumed};  // less than a sample: no new entry
      }
      consume(s, e, index);  // the uses before it are used up
      consumed = true;
      if (s.epochs.empty() || s.epochs.front().get() != &e) {
        return Match{stream, false, true};  // e retired
      }
    }
    Credit& c = e.credits[index];
    const uint64_t take = std::min<uint64_t>(c.left, want);
    c.left -= static_cast<uint32_t>(take);
    want -= take;
    if (want == 0) {
      return Match{stream, false, false, consumed};
    }
  }
  // More uses than e holds for the file (the estimate ran over, or the reader moved on to the
  // next epoch, which on_open starts): a read of the stream's all the same.
  if (auto next = on_open(file, opener)) {
    return next;
  }
  return Match{stream, false, false, consumed};
}

// The first of file's entries in a range order's current epoch of a stream opener may advance.
std::optional<Schedule::Place> Schedule::first_credited(FileId file,
                                                        std::optional<uint32_t> opener) {
  if (file >= links_.size()) {
    return std::nullopt;
  }
  for (uint64_t gid = gid_of(links_[file].first); gid != kNoGid;) {
    const Place p = place_of(gid);
    gid = next_gid(gid, p.epoch->slots[p.index]);
    const Stream& s = streams_[p.epoch->stream];
    if (!p.epoch->credits.empty() && p.epoch == s.epochs.front().get() &&
        (!opener || !s.owner || *s.owner == *opener)) {
      return p;
    }
  }
  return std::nullopt;
}

bool Schedule::this_epoch_only(FileId file) {
  if (file >= links_.size()) {
    return false;
  }
  bool in_current = false;
  for (uint64_t gid = gid_of(links_[file].first); gid != kNoGid;) {
    const Place p = place_of(gid);
    gid = next_gid(gid, p.epoch->slots[p.index]);
    if (p.epoch != streams_[p.epoch->stream].epochs.front().get()) {
      return false;  // a use in a later epoch
    }
    in_current = in_current || !p.epoch->credits.empty();
  }
  return in_current;
}

}  // namespace epochfs::prefetch
