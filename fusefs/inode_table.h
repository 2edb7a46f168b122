// InodeTable: the FUSE node ids the kernel holds, each mapped to a path in the source.
//
// Owner: Filesystem. The kernel refers to files by node id; it takes a reference with every
// successful lookup (and readdirplus entry) and drops them with forget. An entry lives exactly
// as long as the kernel holds a reference, so memory follows what the kernel caches, not how
// many lookups were made.
//
// Identity is the source file's (st_dev, st_ino): two paths to one file (hard links) share an
// entry, and the st_ino reported to users is the source's, so it is stable for the life of the
// mount even when the kernel forgets a node and looks it up again under a new node id. A file
// with one name (st_nlink 1, nearly every file of a dataset) is found by that name instead:
// the rules below give it a new node under any other name, so an index by (st_dev, st_ino) of
// such files would serve nothing and cost ~13 bytes each.
//
// A file's node is reused only for the file it was made for. ext4 and xfs give a deleted
// file's inode number to the next file created, while the kernel may still hold the old name's
// node; reusing that node, with its path rewritten, would lead the old name to the new file.
// So a file whose version (size, mtime, ctime in nanoseconds) or type changed since its node
// last saw it gets a new node, and one found under another name shares its node only if the
// node's name still leads to it (a hard link). A renamed file's node keeps its old, vanished
// path, so that its old name answers as deleted. A directory keeps its node when it changes
// or is renamed: the kernel gives a directory inode one name, and moves it to the new one.
//
// We keep a path per entry, not an fd: an fd per inode would hit the 20,000 open-files limit
// long before a dataset's file count. The path is an id of the engine's FileRegistry, which
// keeps each path once (and the cache on keeps them all anyway): 4 bytes a node instead of a
// string, about 76 less for each of a million inodes the kernel may hold.
//
// Memory, because the kernel may hold a node for every file of an epoch (ImageNet: 1.28 M):
// nodes are 32-byte slots (the version a node saw kept as its digest, the device as a number
// of the table's) in chunks of 1,024, found by id without a map (an id is its slot's number
// and the slot's generation), and by (st_dev, st_ino) through an IdIndex of slot numbers
// (cachestore/id_index.h) for directories and files with several names, by a vector by path
// id for the others; free slots are a stack linked through the slots themselves: about 36
// bytes a held node in all, where two node-based maps took about 140. A slot freed by forget
// serves again under its next generation, so no id is handed out twice: others key state by
// node id (no-open's leases, control files' snapshots) and must never find an old file's
// under a new file's id.
//
// Thread-safety: all methods lock mu_ for memory work only, and call the registry (a leaf
// lock) with mu_ released.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachestore/file_version.h"
#include "cachestore/id_index.h"
#include "cachestore/sync.h"
#include "prefetch/file_registry.h"

namespace epochfs::fusefs {

using InodeId = uint64_t;

// The kernel's fixed id for the mount's root (FUSE_ROOT_ID).
inline constexpr InodeId kRootInodeId = 1;

using cachestore::FileVersion;
using prefetch::FileId;

class InodeTable {
 public:
  // root_st: the source root's attributes; names: where paths are kept (outlives the table).
  InodeTable(const struct stat& root_st, prefetch::FileRegistry& names);

  // Whether another name in the source still leads to the file being added: a hard link.
  // Asks the source; called without the table's lock held.
  using NamesFile = std::function<bool(const std::string& other_path)>;

  // Records one kernel reference to the file at path with attributes st; returns its id.
  // The node that holds st's (st_dev, st_ino) and type is reused, and takes path, if st is a
  // directory, or if the node last saw this version of the file, under path or under a name
  // that names_file confirms still leads to the file. Otherwise st gets a new node, and the
  // old one lives on under its old path until the kernel forgets it. Without names_file,
  // another name never shares a file's node.
  InodeId add_reference(const struct stat& st, const std::string& path,
                        const NamesFile& names_file = {});

  // Drops n references; erases the entry at zero. Unknown ids are ignored (logged by caller).
  // Returns false if the id was unknown.
  bool forget(InodeId id, uint64_t n);

  // The source path of id, or nullopt if the kernel holds no such id.
  std::optional<std::string> path_of(InodeId id) const;

  // Records the version seen at open; returns true if it equals the one seen at the previous
  // open, i.e. pages the kernel cached then are still valid. A lookup that finds another
  // version then gets a new node.
  bool note_version(InodeId id, const FileVersion& version);

  // The node the kernel holds for the file of version v at path (an id of names), if any:
  // the one whose pages were read from v's cached copy.
  std::optional<InodeId> node_of(FileId path, const FileVersion& v) const;

  size_t size() const;

  // After the kernel has forgotten most of the entries it once held (a walk of a huge tree
  // done, memory pressure, drop_caches): gives the tables' spare buckets back and returns true,
  // once per fall below a quarter of the peak, so that the caller can return freed memory to
  // the system. False otherwise.
  bool shrink_if_mostly_forgotten();

  // The kernel's reference count for id (0 if unknown). For tests.
  uint64_t lookup_count(InodeId id) const;

 private:
  // A file's identity: its inode number and its device, as an index in devices_ (a source
  // spans few devices, so a node keeps 3 bytes for one instead of 8).
  struct Key {
    uint32_t device;
    ino_t ino;
    bool operator==(const Key&) const = default;
  };

  // Mixed (splitmix64's finalizer): the index takes a slot from the low bits, and inode
  // numbers of one directory's files run in sequence.
  static uint64_t hash_of(const Key& k) {
    uint64_t x = k.ino ^ (static_cast<uint64_t>(k.device) * 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  // A version as FileVersion::digest; kNoVersion: none, or another file's (see()).
  using Stamp = uint64_t;
  static constexpr Stamp kNoVersion = 0;

  // Devices past this many share the last index: their files' nodes are told apart by their
  // versions (whose digests hold the device) and names, directories' not at all. A source
  // mounts no such number of filesystems.
  static constexpr uint32_t kMaxDevices = uint32_t{1} << 24;

  // 32 bytes: a million of them is what the kernel may hold after one epoch of ImageNet.
  struct Inode {
    ino_t ino = 0;
    // At the latest lookup or open, with the key. A file's node keeps one version (a changed
    // file gets a new node), so the version at its latest open is `seen` once `opened`.
    Stamp seen = kNoVersion;
    FileId path = 0;  // in names_; a free slot: the next free slot (free_head_)
    // The kernel's references; one that reaches UINT32_MAX stays there (the node is kept for
    // good rather than dropped while the kernel may still hold it). 0: a free slot.
    uint32_t nlookup = 0;
    uint32_t generation = 0;  // the slot's: the high half of its node's id
    uint32_t device : 24 = 0;
    uint32_t type : 4 = 0;  // st_mode's S_IFMT, shifted down
    uint32_t opened : 1 = 0;
    uint32_t keyed : 1 = 0;  // in by_key_, else in by_name_

    Key key() const { return Key{device, ino}; }

    // Whether the file of key, at version v, is what this node last saw.
    bool saw(const Key& k, const FileVersion& v) const { return key() == k && seen == v.digest(); }

    // Records v, of the file of key k, as seen. Another file than the node's (an open that
    // found the name replaced since its lookup) is recorded as no version, so that no later
    // lookup or open takes the node, or the pages the kernel read for it, as that of an
    // unchanged file.
    void see(const Key& k, const FileVersion& v) { seen = key() == k ? v.digest() : kNoVersion; }
  };

  static uint32_t type_bits(uint16_t type) { return type >> 12; }

  // Slots, kChunkSlots to a chunk; a chunk all of whose slots are free may be given back (by
  // shrink_if_mostly_forgotten), and its slots' generations go on from the highest it used.
  static constexpr uint32_t kChunkSlots = 1024;
  // Past this a slot is retired, so that ids stay below the control directory's (2^62).
  static constexpr uint32_t kMaxGeneration = uint32_t{1} << 29;

  struct Chunk {
    std::unique_ptr<Inode[]> slots;  // null: given back
    uint32_t live = 0;
    uint32_t next_generation = 0;  // for the slots of a chunk made again
  };

  static void add_one(Inode& inode) {
    if (inode.nlookup != UINT32_MAX) {
      ++inode.nlookup;
    }
  }

  // What a lookup found: st's key, version and type.
  static constexpr FileId kNoName = UINT32_MAX;

  struct Found {
    Key key;
    FileVersion version;
    uint16_t type;
    bool keyed;  // a directory, or a file with several names: found by key, not by name
  };

  // Takes one more reference on the node that holds found.key, if it may serve path (see
  // add_reference); linked: a name of the node that the source confirmed still leads to the
  // file. Otherwise nullopt, and *to_check (if given) is set to the node's other name when
  // confirming it would allow the reuse.
  std::optional<InodeId> reuse_locked(const Found& found, FileId path, const FileId* linked,
                                      FileId* to_check) REQUIRES(mu_);

  // A new node for found at path, which takes found.key over from any older node.
  InodeId add_node_locked(const Found& found, FileId path) REQUIRES(mu_);

  // The slot of the node held under id, or 0.
  static uint32_t held_slot(const std::vector<Chunk>& chunks, InodeId id);
  // The node held under id, or nullptr.
  Inode* find_locked(InodeId id) REQUIRES(mu_);
  const Inode* find_locked(InodeId id) const REQUIRES(mu_);

  Inode& slot(uint32_t n) REQUIRES(mu_) { return chunks_[n / kChunkSlots].slots[n % kChunkSlots]; }

  const Inode& slot(uint32_t n) const REQUIRES(mu_) {
    return chunks_[n / kChunkSlots].slots[n % kChunkSlots];
  }

  InodeId id_of_slot(uint32_t n) const REQUIRES(mu_) {
    return InodeId{slot(n).generation} << 32 | n;
  }

  // The slot of key's newest node, or IdIndex::kNone.
  uint32_t newest_slot(const Key& key) const REQUIRES(mu_);
  // The slot of the newest node of the file found at path, or IdIndex::kNone.
  uint32_t newest_slot(const Found& found, FileId path) const REQUIRES(mu_);
  // Makes room in by_name_ for path; throws std::bad_alloc.
  void make_room_for(FileId path) REQUIRES(mu_);
  // v's key, its device numbered if new; throws std::bad_alloc.
  Key key_of(const FileVersion& v) REQUIRES(mu_);
  // v's key if its device has a number.
  std::optional<Key> known_key_of(const FileVersion& v) const REQUIRES(mu_);
  // A free slot, making (or making again) a chunk if there is none; throws std::bad_alloc.
  uint32_t free_slot_locked() REQUIRES(mu_);
  // Frees slot n (its node forgotten) for its next generation.
  void free_locked(uint32_t n) REQUIRES(mu_);
  // Gives back the chunks with no node held.
  void give_back_empty_chunks_locked() REQUIRES(mu_);

  prefetch::FileRegistry& names_;
  mutable cachestore::Mutex mu_;
  std::vector<Chunk> chunks_ GUARDED_BY(mu_);
  // The free slots of the chunks made, a stack linked through their path fields, so that a
  // forget (which cannot fail) never allocates; IdIndex::kNone ends it.
  uint32_t free_head_ GUARDED_BY(mu_) = cachestore::IdIndex::kNone;
  std::unordered_map<dev_t, uint32_t> devices_ GUARDED_BY(mu_);  // device -> its number
  cachestore::IdIndex by_key_ GUARDED_BY(mu_);     // key -> the slot of its newest keyed node
  std::vector<uint32_t> by_name_ GUARDED_BY(mu_);  // path -> its newest other node's slot
  size_t size_ GUARDED_BY(mu_) = 0;
  size_t peak_ GUARDED_BY(mu_) = 0;  // most nodes held since the last shrink
};

}  // namespace epochfs::fusefs
