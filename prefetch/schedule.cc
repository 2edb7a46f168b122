#include "prefetch/schedule.h"

#include <errno.h>

#include <algorithm>

namespace epochfs::prefetch {

using cachestore::Result;
using cachestore::Status;

namespace {

uint64_t end_of(const auto& epoch) { return epoch.start + epoch.slots.size(); }

}  // namespace

std::optional<size_t> Schedule::find_stream(const std::string& id) const {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].id == id) {
      return i;
    }
  }
  return std::nullopt;
}

size_t Schedule::stream_index(const std::string& id, bool* created) {
  *created = false;
  if (auto found = find_stream(id)) {
    return *found;
  }
  *created = true;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].id.empty()) {
      streams_[i] = Stream{id, {}, 0, 0, 0, std::nullopt, std::nullopt};
      return i;
    }
  }
  if (streams_.size() >= kMaxStreams) {
    return SIZE_MAX;
  }
  streams_.push_back(Stream{id, {}, 0, 0, 0, std::nullopt, std::nullopt});
  return streams_.size() - 1;
}

uint64_t Schedule::stream_entries(size_t stream) const {
  uint64_t n = 0;
  for (const auto& e : streams_[stream].epochs) {
    n += e->slots.size();
  }
  return n;
}

void Schedule::clear_epochs(Stream& s) {
  for (const auto& e : s.epochs) {
    entries_held_ -= e->slots.size();
  }
  s.epochs.clear();
  s.last_number.reset();
  s.tail = s.head = s.plan = 0;
}

void Schedule::drop_stream(size_t stream) {
  Stream& s = streams_[stream];
  const bool had_epochs = !s.epochs.empty();
  clear_epochs(s);
  s.id.clear();
  if (had_epochs) {
    relink_all();
  }
}

Result<Schedule::Published> Schedule::publish(const std::string& stream_id,
                                              std::optional<uint64_t> epoch,
                                              std::vector<FileId> entries,
                                              std::optional<uint32_t> owner, bool restart,
                                              const std::vector<uint32_t>& uses) {
  if (entries.empty()) {
    return Status::error(EINVAL, "no entries");
  }
  if (!uses.empty() && uses.size() != entries.size()) {
    return Status::error(EINVAL, "uses not one per entry");
  }
  bool created = false;
  const size_t si = stream_index(stream_id, &created);
  if (si == SIZE_MAX) {
    return Status::error(EINVAL, "more than " + std::to_string(kMaxStreams) + " streams");
  }
  Stream& s = streams_[si];
  s.owner = owner;
  const uint64_t number = epoch.value_or(s.last_number ? *s.last_number + 1 : 0);
  auto& q = s.epochs;
  const bool restarted = !q.empty() && (restart || number < q.front()->number);
  if (restarted) {
    clear_epochs(s);
    relink_all();
  }
  auto same = std::find_if(q.begin(), q.end(), [&](const auto& e) { return e->number == number; });
  const bool replaced = same != q.end();
  if (!replaced && q.size() >= kMaxEpochsPerStream) {
    return Status::error(EINVAL, std::to_string(q.size()) + " epochs already queued");
  }
  const uint64_t held = entries_held_ + entries.size() - (replaced ? (*same)->slots.size() : 0);
  if (held > kMaxEntries) {
    if (created) {
      s.id.clear();  // a refused first publish leaves no stream behind
    }
    return Status::error(
        EINVAL, "the schedule would hold more than " + std::to_string(kMaxEntries) + " entries");
  }
  entries_held_ = held;

  auto fresh = std::make_unique<Epoch>(Epoch{si, number, next_gid_, 0, {}, {}});
  next_gid_ += entries.size();
  fresh->slots.reserve(entries.size());
  for (FileId f : entries) {
    fresh->slots.push_back(Slot{f, 0});
  }
  entries = {};
  fresh->credits.reserve(uses.size());
  for (uint32_t n : uses) {
    const uint32_t kept = std::clamp<uint32_t>(n, 1, kMaxUses);
    fresh->credits.push_back(Credit{kept, kept * kUseUnits});
  }
  const bool appended_last = !replaced && (q.empty() || q.back()->number < number);
  if (replaced) {
    fresh->start = (*same)->start;
    const bool was_front = same == q.begin();
    *same = std::move(fresh);
    if (was_front) {
      restart_timeline(s);  // the trainer starts the replaced order from its beginning
    }
  } else {
    auto at = std::find_if(q.begin(), q.end(), [&](const auto& e) { return e->number > number; });
    fresh->start = q.empty() ? std::max(s.head, s.tail) : 0;
    q.insert(at, std::move(fresh));
    if (q.size() == 1) {
      restart_timeline(s);
    }
  }
  for (size_t i = 1; i < q.size(); ++i) {
    q[i]->start = end_of(*q[i - 1]);
  }
  s.last_number = std::max(s.last_number.value_or(0), number);
  if (appended_last) {
    by_gid_.push_back(q.back().get());
    link_epoch(*q.back());
  } else {
    s.plan = std::min(s.plan, s.tail);
    relink_all();
  }
  return Published{si, number, replaced, restarted, created};
}

void Schedule::restart_timeline(Stream& s) { s.tail = s.head = s.plan = s.epochs.front()->start; }

void Schedule::link_epoch(Epoch& e) {
  // Grow links_ once, to exactly what this epoch needs: growing it file by file would let the
  // vector's doubling leave up to twice the memory reserved.
  FileId top = 0;
  for (const Slot& slot : e.slots) {
    top = std::max(top, slot.file);
  }
  if (top >= links_.size()) {
    links_.reserve(static_cast<size_t>(top) + 1);
    links_.resize(static_cast<size_t>(top) + 1);
  }
  for (size_t i = 0; i < e.slots.size(); ++i) {
    Slot& slot = e.slots[i];
    slot.link &= kConsumed;
    Links& l = links_[slot.file];
    const uint64_t gid = e.gid + i;
    if (l.last == kNoLink) {
      l.first = link_of(gid);
    } else {
      const Place prev = place_of(l.last);
      prev.epoch->slots[prev.index].link |= static_cast<uint32_t>(gid - l.last);
    }
    l.last = link_of(gid);
  }
}

// Rebuilds every link, with gids renumbered densely (so link distances stay within 31 bits).
// O(entries held + files): runs when an epoch leaves or is replaced, about once per epoch.
void Schedule::relink_all() {
  by_gid_.clear();
  for (auto& s : streams_) {
    for (auto& e : s.epochs) {
      by_gid_.push_back(e.get());
    }
  }
  std::sort(by_gid_.begin(), by_gid_.end(), [](auto* a, auto* b) { return a->gid < b->gid; });
  std::fill(links_.begin(), links_.end(), Links{});
  next_gid_ = 0;
  for (Epoch* e : by_gid_) {
    e->gid = next_gid_;
    next_gid_ += e->slots.size();
    link_epoch(*e);
  }
}

Schedule::Place Schedule::place_of(uint64_t gid) const {
  auto it = std::upper_bound(by_gid_.begin(), by_gid_.end(), gid,
                             [](uint64_t g, const Epoch* e) { return g < e->gid; });
  Epoch* e = *(it - 1);
  return Place{e, static_cast<size_t>(gid - e->gid)};
}

uint64_t Schedule::next_gid(uint64_t gid, const Slot& slot) const {
  const uint32_t distance = slot.link & ~kConsumed;
  return distance == 0 ? kNoGid : gid + distance;
}

Schedule::Slot* Schedule::slot_at(Stream& s, uint64_t pos) {
  for (auto& e : s.epochs) {
    if (pos >= e->start && pos < end_of(*e)) {
      return &e->slots[pos - e->start];
    }
  }
  return nullptr;
}

std::optional<Schedule::Match> Schedule::on_open(FileId file, std::optional<uint32_t> opener) {
  if (file >= links_.size()) {
    return std::nullopt;
  }
  // Candidates among the file's unconsumed occurrences: in a current epoch near the head
  // (the usual case), at the start of a next epoch, or in a current epoch far from the head.
  std::optional<Place> near, next_start, far;
  uint64_t near_distance = kNever;
  for (uint64_t gid = gid_of(links_[file].first); gid != kNoGid;) {
    const Place p = place_of(gid);
    const Slot& slot = p.epoch->slots[p.index];
    gid = next_gid(gid, slot);
    if ((slot.link & kConsumed) != 0) {
      continue;
    }
    Stream& s = streams_[p.epoch->stream];
    if (opener && s.owner && *s.owner != *opener) {
      continue;  // another user's stream
    }
    const uint64_t t = p.epoch->start + p.index;
    if (p.epoch == s.epochs.front().get() && t >= s.tail) {
      const uint64_t distance = t >= s.head ? t - s.head : s.head - t;
      if (t < s.head + reorder_window_ && distance < near_distance) {
        near = p;
        near_distance = distance;
      } else if (!far) {
        far = p;
      }
    } else if (s.epochs.size() > 1 && p.epoch == s.epochs[1].get() && p.index < reorder_window_ &&
               !next_start) {
      next_start = p;
    }
  }
  if (near || (!next_start && far)) {
    const Place p = near ? *near : *far;
    const size_t stream = p.epoch->stream;  // consume may retire (free) the epoch
    Stream& s = streams_[stream];
    const Epoch* front = s.epochs.front().get();
    consume(s, *p.epoch, p.index);
    return Match{stream, false, s.epochs.empty() || s.epochs.front().get() != front};
  }
  if (next_start) {
    Epoch* e = next_start->epoch;
    const size_t stream = e->stream;  // consume may retire (free) the epoch
    Stream& s = streams_[stream];
    retire_front(s);  // relinks; e stays valid (owned by the queue)
    consume(s, *e, next_start->index);
    return Match{stream, true};
  }
  return std::nullopt;
}

void Schedule::consume(Stream& s, Epoch& e, size_t index) {
  e.slots[index].link |= kConsumed;
  s.head = std::max(s.head, e.start + index + 1);
  advance_tail(s);
}

// Moves the tail past consumed entries, and past entries left more than the reorder window behind
// the head (taken as skipped); retires the current epoch once the tail leaves it.
void Schedule::advance_tail(Stream& s) {
  while (!s.epochs.empty()) {
    Epoch& front = *s.epochs.front();
    const uint64_t skip_to = s.head > reorder_window_ ? s.head - reorder_window_ : 0;
    s.tail = std::max(s.tail, front.start);
    while (s.tail < end_of(front)) {
      Slot& slot = front.slots[s.tail - front.start];
      if ((slot.link & kConsumed) == 0 && s.tail >= skip_to) {
        return;
      }
      slot.link |= kConsumed;
      ++s.tail;
    }
    retire_front(s);
  }
}

void Schedule::retire_front(Stream& s) {
  entries_held_ -= s.epochs.front()->slots.size();
  s.epochs.pop_front();
  relink_all();
  if (!s.epochs.empty()) {
    const uint64_t start = s.epochs.front()->start;
    s.tail = std::max(s.tail, start);
    s.head = std::max(s.head, start);
    s.plan = std::max(s.plan, s.tail);
  }
}

int64_t Schedule::mean_head() const {
  int64_t sum = 0;
  int64_t n = 0;
  for (const auto& s : streams_) {
    if (!s.epochs.empty()) {
      sum += static_cast<int64_t>(s.head);
      ++n;
    }
  }
  return n == 0 ? 0 : sum / n;
}

uint64_t Schedule::next_use(FileId file) {
  if (file >= links_.size()) {
    return kNever;
  }
  Links& l = links_[file];
  uint64_t best = kNever;
  const int64_t shift = mean_head();
  for (uint64_t gid = gid_of(l.first); gid != kNoGid;) {
    const Place p = place_of(gid);
    const Slot& slot = p.epoch->slots[p.index];
    const uint64_t next = next_gid(gid, slot);
    if ((slot.link & kConsumed) != 0) {
      // Consumed occurrences at the front of the chain are done with, but a range order's:
      // on_block_read counts the uses of all of a block's entries.
      if (gid == gid_of(l.first) && p.epoch->credits.empty()) {
        l.first = link_of(next);
        if (next == kNoGid) {
          l.last = kNoLink;
        }
      }
      gid = next;
      continue;
    }
    const Stream& s = streams_[p.epoch->stream];
    const uint64_t t = p.epoch->start + p.index;
    const uint64_t ahead = t > s.head ? t - s.head : 0;
    best = std::min(best, ahead + static_cast<uint64_t>(shift));
    gid = next;
  }
  return best;
}

bool Schedule::repeats(FileId file) {
  if (file >= links_.size()) {
    return false;
  }
  // An epoch's occurrences are linked one after another (publish appends them together).
  const Epoch* last = nullptr;
  for (uint64_t gid = gid_of(links_[file].first); gid != kNoGid;) {
    const Place p = place_of(gid);
    const Slot& slot = p.epoch->slots[p.index];
    if ((slot.link & kConsumed) == 0) {
      if (p.epoch == last) {
        return true;
      }
      last = p.epoch;
    }
    gid = next_gid(gid, slot);
  }
  return false;
}

std::optional<FileId> Schedule::next_to_stage(size_t stream, uint64_t ahead) {
  Stream& s = streams_[stream];
  s.plan = std::max(s.plan, s.tail);
  while (!s.epochs.empty() && s.plan < s.head + ahead) {
    const Slot* slot = slot_at(s, s.plan);
    if (slot == nullptr) {
      return std::nullopt;  // past the last published epoch
    }
    ++s.plan;
    if ((slot->link & kConsumed) == 0) {
      return slot->file;
    }
  }
  return std::nullopt;
}

void Schedule::replan() {
  for (Stream& s : streams_) {
    s.plan = std::min(s.plan, s.head);
  }
}

Schedule::StreamView Schedule::view(size_t stream) const {
  const Stream& s = streams_[stream];
  StreamView v;
  v.id = s.id;
  if (s.epochs.empty()) {
    return v;
  }
  const Epoch& front = *s.epochs.front();
  v.active = true;
  v.epoch = front.number;
  v.epoch_length = front.slots.size();
  v.position = s.head - front.start;
  v.planned_ahead = s.plan > s.head ? s.plan - s.head : 0;
  v.epochs_queued = s.epochs.size() - 1;
  return v;
}

uint64_t Schedule::memory_bytes() const {
  uint64_t bytes = links_.capacity() * sizeof(Links) + by_gid_.capacity() * sizeof(Epoch*);
  for (const auto& s : streams_) {
    for (const auto& e : s.epochs) {
      bytes += e->slots.capacity() * sizeof(Slot) + e->credits.capacity() * sizeof(Credit) +
               sizeof(Epoch);
    }
  }
  return bytes;
}

}  // namespace epochfs::prefetch
