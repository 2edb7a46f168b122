#include "cachestore/cache_store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <xxhash.h>

#include "cachestore/copy.h"
#include "test/cachestore/page_cache.h"
#include "test/support/scratch_dir.h"

#include <rapidcheck/catch.h>

namespace epochfs::cachestore {
namespace {

namespace fs = std::filesystem;

constexpr char kSourceKey[] = "/data/train";

// A scratch directory under /tmp with src/ (source files) and cache/ (the cache root).
struct Scratch {
  test::ScratchDir dir{"cachestore"};
  fs::path base = dir.path();

  Scratch() {
    fs::create_directories(src());
    fs::create_directories(cache());
  }

  fs::path src() const { return base / "src"; }

  fs::path cache() const { return base / "cache"; }
};

// A tmpfs mounted on dir for the guard's life; unmounted lazily if a plain umount fails. Mode
// 0700: the tests use it as the cache root, which must not be writable by others (a tmpfs's
// root is 1777 by default).
class TmpfsMount {
 public:
  TmpfsMount(const fs::path& dir, const std::string& options) : dir_(dir) {
    fs::create_directories(dir);
    const std::string private_options = options + ",mode=0700";
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, private_options.c_str()) == 0;
    error_ = mounted_ ? 0 : errno;
  }

  ~TmpfsMount() {
    if (mounted_ && ::umount(dir_.c_str()) != 0) {
      ::umount2(dir_.c_str(), MNT_DETACH);
    }
  }

  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool mounted() const { return mounted_; }

  int error() const { return error_; }

 private:
  fs::path dir_;
  bool mounted_ = false;
  int error_ = 0;
};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) {
    c = static_cast<char>(rng());
  }
  return s;
}

void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    throw std::runtime_error("open " + p.string());
  }
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n <= 0) {
      throw std::runtime_error("write " + p.string());
    }
    done += static_cast<size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0) {
      throw std::runtime_error("pread failed");
    }
    if (n == 0) {
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
}

// A source file, open for reading, with the version it had when opened.
struct Source {
  std::string rel;  // path relative to the source root
  std::string content;
  UniqueFd fd;
  FileVersion version;
};

Source make_source(const fs::path& src_root, const std::string& rel, std::string content) {
  Source s;
  s.rel = rel;
  s.content = std::move(content);
  write_file(src_root / rel, s.content);
  s.fd.reset(::open((src_root / rel).c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!s.fd.valid() || ::fstat(s.fd.get(), &st) != 0) {
    throw std::runtime_error("open source " + rel);
  }
  s.version = FileVersion::of(st);
  return s;
}

uint64_t block_size_of(const fs::path& dir) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) {
    throw std::runtime_error("statvfs " + dir.string());
  }
  return st.f_frsize > 0 ? st.f_frsize : 4096;
}

uint64_t round_to_blocks(uint64_t size, uint64_t block) {
  return std::max<uint64_t>(1, (size + block - 1) / block) * block;
}

// What names id's copy: the path the engine's registry would give (CacheStore::set_names).
std::string path_of(FileId id) { return "file-" + std::to_string(id); }

std::unique_ptr<CacheStore> open_store(const fs::path& root, uint64_t capacity,
                                       double reserve_fraction = 0,
                                       CacheStore::PathOf names = path_of) {
  CacheOptions options;
  options.root = root;
  options.source_key = kSourceKey;
  options.capacity_bytes = capacity;
  options.reserve_fraction = reserve_fraction;
  auto store = CacheStore::open(options, std::make_unique<LruPolicy>());
  INFO(store.status().to_string());
  REQUIRE(store.is_ok());
  store.value()->set_names(std::move(names), [](FileId) { return std::nullopt; });
  return std::move(store).value();
}

// Stages src as id and commits it; true if a copy is now cached.
bool stage(CacheStore& store, FileId id, const Source& src) {
  auto s = store.begin_staging(id, src.content.size());
  if (!s) {
    return false;
  }
  bool fault = false;
  auto hash = copy_into(src.fd.get(), *s, &fault);
  if (!hash.is_ok()) {
    store.abort(std::move(*s), fault ? hash.error_code() : 0);
    return false;
  }
  return store.commit(std::move(*s), src.version, hash.value()).is_ok();
}

// The content of id's copy at version, or nullopt on a miss. Unpins after reading.
std::optional<std::string> cached_content(CacheStore& store, FileId id,
                                          const FileVersion& version) {
  auto fd = store.open_copy(id, version);
  if (!fd) {
    return std::nullopt;
  }
  std::string content = read_all(fd->get());
  store.unpin(id);
  return content;
}

fs::path object_path(const CacheStore& store, FileId id) {
  return fs::path(store.path()) / CacheDir::object_name(path_of(id));
}

// Regular files under the store's directory, other than its lock file. Throws on anything
// that is neither a regular file nor a directory.
std::vector<fs::path> files_in(const CacheStore& store) {
  std::vector<fs::path> out;
  const fs::path lock = fs::path(store.path()) / "lock";
  for (const auto& e : fs::recursive_directory_iterator(store.path())) {
    if (e.is_directory()) {
      continue;
    }
    if (!e.is_regular_file()) {
      throw std::runtime_error("unexpected entry " + e.path().string());
    }
    if (e.path() != lock) {
      out.push_back(e.path());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("CacheStore::read_in returns with the copy's pages in memory", "[cache_store]") {
  Scratch t;
  struct statfs fs_info;
  REQUIRE(::statfs(t.cache().c_str(), &fs_info) == 0);
  if (fs_info.f_type == TMPFS_MAGIC) {
    WARN("SKIPPED: /tmp is tmpfs, whose pages cannot be dropped to be read again");
    return;
  }
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/block", random_bytes(1 << 20, 11));
  REQUIRE(stage(*store, 7, src));
  const std::string object = object_path(*store, 7);
  test::drop_pages(object);
  REQUIRE(test::resident_pages(object) < test::pages_of(object));
  store->read_in(7);
  // Read, not advised: every page is there when it returns, with nothing waited for here.
  CHECK(test::resident_pages(object) == test::pages_of(object));
  CHECK(store->stats().read_ahead == 1);
  store->read_in(8);  // no copy: nothing read, nothing counted
  CHECK(store->stats().read_ahead == 1);
}

TEST_CASE("copies on many threads fault their chunk buffer's pages in once", "[cache_store]") {
  // The stager hands copies to its threads in turn, all of them alive: a buffer per thread was
  // faulted in (64 pages of 256 KiB) by nearly every copy. Here each thread copies in turn
  // while every other stays alive; faults counted per thread (RUSAGE_THREAD), around the copy.
  constexpr int kThreads = 16;
  Scratch t;
  const Source src = make_source(t.src(), "big.bin", random_bytes(1 << 20, 3));
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  std::vector<uint64_t> faults(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return turn == i; });
      struct rusage before {};
      struct rusage after {};
      ::getrusage(RUSAGE_THREAD, &before);
      auto hash = hash_fd(src.fd.get(), src.content.size());
      ::getrusage(RUSAGE_THREAD, &after);
      faults[i] = hash.is_ok() ? static_cast<uint64_t>(after.ru_minflt - before.ru_minflt) : 999;
      ++turn;
      cv.notify_all();
      cv.wait(lock, [&] { return turn == kThreads; });  // alive until every copy is done
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  uint64_t after_first = 0;
  for (int i = 1; i < kThreads; ++i) {
    after_first += faults[i];
  }
  // 15 x 64 with a buffer per thread; a few per thread with shared buffers.
#if defined(__SANITIZE_THREAD__)
  // TSan's runtime faults in shadow and per-thread state at each thread's first accesses.
  WARN("not counted under ThreadSanitizer: " << after_first << " faults");
#else
  CHECK(after_first < (kThreads - 1) * 16);
#endif
}

TEST_CASE("CacheStore serves a committed copy byte for byte", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const uint64_t block = block_size_of(t.cache());
  // More than copy_into's 256 KiB chunk, and not a whole number of blocks.
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes((2 << 20) + 12345, 7));
  const uint64_t size = src.content.size();

  auto s = store->begin_staging(7, size);
  REQUIRE(s.has_value());
  CHECK(s->id() == 7);
  CHECK(s->size() == size);
  CHECK(s->fd() >= 0);
  // The capacity is reserved before the first byte is copied.
  CHECK(store->stats().copies_in_flight == 1);
  CHECK(store->stats().used_bytes == round_to_blocks(size, block));

  bool fault = true;
  auto hash = copy_into(src.fd.get(), *s, &fault);
  REQUIRE(hash.is_ok());
  CHECK_FALSE(fault);
  CHECK(hash.value() == XXH3_64bits(src.content.data(), src.content.size()));
  // Not visible before commit: no hit, and nothing at the final name.
  CHECK_FALSE(store->open_copy(7, src.version).has_value());
  CHECK_FALSE(fs::exists(object_path(*store, 7)));

  REQUIRE(store->commit(std::move(*s), src.version, hash.value()).is_ok());
  const CacheStats st = store->stats();
  CHECK(st.files_staged == 1);
  CHECK(st.bytes_staged == size);
  CHECK(st.files_cached == 1);
  CHECK(st.copies_in_flight == 0);
  CHECK(st.copies_aborted == 0);
  CHECK(st.used_bytes == round_to_blocks(size, block));

  auto fd = store->open_copy(7, src.version);
  REQUIRE(fd.has_value());
  const std::string got = read_all(fd->get());
  CHECK(got.size() == size);
  CHECK(got == src.content);
  store->unpin(7);
  // The copy sits at its object name, and nothing else does.
  const auto files = files_in(*store);
  REQUIRE(files.size() == 1);
  CHECK(files[0] == object_path(*store, 7));
  // A second reader hits too.
  CHECK(cached_content(*store, 7, src.version) == src.content);
  // Another id was never staged.
  CHECK_FALSE(store->open_copy(8, src.version).has_value());
}

TEST_CASE("CacheStore stages each file once at a time", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const uint64_t block = block_size_of(t.cache());
  const Source src = make_source(t.src(), "x/one.bin", random_bytes(5000, 1));

  auto first = store->begin_staging(1, src.content.size());
  REQUIRE(first.has_value());
  // Already staging: refused, and not charged twice.
  CHECK_FALSE(store->begin_staging(1, src.content.size()).has_value());
  CHECK(store->stats().copies_in_flight == 1);
  CHECK(store->stats().used_bytes == round_to_blocks(5000, block));
  // Another id is independent.
  auto other = store->begin_staging(2, 10);
  CHECK(other.has_value());
  store->abort(std::move(*other), 0);

  bool fault = false;
  auto hash = copy_into(src.fd.get(), *first, &fault);
  REQUIRE(hash.is_ok());
  REQUIRE(store->commit(std::move(*first), src.version, hash.value()).is_ok());
  // Ready: refused as well.
  CHECK_FALSE(store->begin_staging(1, src.content.size()).has_value());
  CHECK(store->stats().files_staged == 1);
  CHECK(store->stats().used_bytes == round_to_blocks(5000, block));
  CHECK(cached_content(*store, 1, src.version) == src.content);
  // None of these refusals is for lack of room.
  CHECK(store->stats().skipped_no_room == 0);
}

TEST_CASE("CacheStore stages nothing for a file it cannot name", "[cache_store]") {
  Scratch t;
  // Released from the registry (its path is empty): the engine never asks, but if it did,
  // the copy would have no name to be found, or removed, by.
  auto store = open_store(t.cache(), uint64_t{1} << 30, 0,
                          [](FileId id) { return id == 3 ? std::string() : path_of(id); });
  CHECK_FALSE(store->begin_staging(3, 100).has_value());
  CHECK(store->stats().used_bytes == 0);
  CHECK(store->stats().copies_in_flight == 0);
  CHECK(files_in(*store).empty());
  CHECK(store->begin_staging(4, 100).has_value());
}

TEST_CASE("CacheStore finds and removes a copy whose path went as it started", "[cache_store]") {
  Scratch t;
  // The registry releases id 5's path while its copy starts (Engine::name_raced_copies).
  auto five = std::make_shared<std::string>(path_of(5));
  auto store = open_store(t.cache(), uint64_t{1} << 30, 0,
                          [five](FileId id) { return id == 5 ? *five : path_of(id); });
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(3000, 1));
  REQUIRE(stage(*store, 5, src));
  five->clear();
  CHECK_FALSE(store->open_copy(5, src.version).has_value());  // no name: read from the source
  CHECK(store->stats().files_cached == 1);

  store->keep_names({{5, path_of(5)}});
  CHECK(cached_content(*store, 5, src.version) == src.content);
  store->drop(5);
  CHECK_FALSE(fs::exists(object_path(*store, 5)));
  CHECK(store->stats().used_bytes == 0);
  CHECK(store->stats().files_cached == 0);

  // The name went with the entry, and one kept for an id with no entry is not kept.
  store->keep_names({{5, path_of(5)}});
  CHECK_FALSE(store->begin_staging(5, 100).has_value());
  CHECK(store->stats().used_bytes == 0);
  CHECK(files_in(*store).empty());
}

TEST_CASE("CacheStore drops a copy of another version", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source old_src = make_source(t.src(), "a/b.jpg", random_bytes(3000, 1));
  REQUIRE(stage(*store, 5, old_src));
  REQUIRE(cached_content(*store, 5, old_src.version) == old_src.content);

  // The source is rewritten: a new version.
  const Source new_src = make_source(t.src(), "a/b.jpg", random_bytes(4000, 2));
  REQUIRE_FALSE(new_src.version == old_src.version);
  CHECK_FALSE(store->open_copy(5, new_src.version).has_value());
  CacheStats st = store->stats();
  CHECK(st.dropped_stale == 1);
  CHECK(st.files_cached == 0);
  CHECK(st.used_bytes == 0);
  CHECK_FALSE(fs::exists(object_path(*store, 5)));
  // The old version is gone too.
  CHECK_FALSE(store->open_copy(5, old_src.version).has_value());
  CHECK(store->stats().dropped_stale == 1);

  // The new version can be staged and served.
  REQUIRE(stage(*store, 5, new_src));
  CHECK(cached_content(*store, 5, new_src.version) == new_src.content);
  CHECK_FALSE(store->open_copy(5, old_src.version).has_value());
  CHECK(store->stats().dropped_stale == 2);
}

TEST_CASE("CacheStore charges whole blocks", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const uint64_t block = block_size_of(t.cache());
  REQUIRE(block % 512 == 0);

  const Source one = make_source(t.src(), "one", "x");
  REQUIRE(stage(*store, 1, one));
  CHECK(store->stats().used_bytes == block);

  const Source empty = make_source(t.src(), "empty", "");
  REQUIRE(stage(*store, 2, empty));  // at least one block
  CHECK(store->stats().used_bytes == 2 * block);
  CHECK(cached_content(*store, 2, empty.version) == "");

  const Source exact = make_source(t.src(), "exact", random_bytes(block, 3));
  REQUIRE(stage(*store, 3, exact));
  CHECK(store->stats().used_bytes == 3 * block);

  const Source over = make_source(t.src(), "over", random_bytes(block + 1, 4));
  REQUIRE(stage(*store, 4, over));
  CHECK(store->stats().used_bytes == 5 * block);
  CHECK(store->stats().used_bytes % block == 0);
  CHECK(store->stats().bytes_staged == 1 + 0 + block + block + 1);
}

TEST_CASE("CacheStore stages without evicting when told not to", "[cache_store]") {
  Scratch t;
  const uint64_t block = block_size_of(t.cache());
  auto store = open_store(t.cache(), 2 * block);
  const Source a = make_source(t.src(), "a", random_bytes(block, 1));
  const Source b = make_source(t.src(), "b", random_bytes(block, 2));
  const Source c = make_source(t.src(), "c", random_bytes(block, 3));
  REQUIRE(stage(*store, 1, a));
  auto free_room = store->begin_staging(2, block, false);  // fits beside a
  CHECK(free_room.has_value());
  store->abort(std::move(*free_room), 0);
  REQUIRE(stage(*store, 2, b));
  CHECK_FALSE(store->begin_staging(3, block, false).has_value());
  CHECK(store->stats().evictions == 0);
  CHECK(store->stats().skipped_no_room == 1);
  CHECK(cached_content(*store, 1, a.version) == a.content);
  CHECK(stage(*store, 3, c));  // may evict: takes the room
  CHECK(store->stats().evictions == 1);
}

TEST_CASE("copy_range joins pieces of cached copies into one, at their offsets", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source first = make_source(t.src(), "first", random_bytes(300000, 1));
  const Source second = make_source(t.src(), "second", random_bytes(5000, 2));
  const std::string whole = first.content + second.content;
  auto s = store->begin_staging(9, whole.size());
  REQUIRE(s.has_value());
  bool fault = true;
  // The second piece first: each lands at its own offset.
  REQUIRE(copy_range(second.fd.get(), 0, *s, first.content.size(), second.content.size(), &fault)
              .is_ok());
  CHECK_FALSE(fault);
  REQUIRE(copy_range(first.fd.get(), 0, *s, 0, first.content.size(), &fault).is_ok());
  auto hash = hash_fd(s->fd(), whole.size());  // the temporary file reads back
  REQUIRE(hash.is_ok());
  CHECK(hash.value() == XXH3_64bits(whole.data(), whole.size()));
  const FileVersion version{static_cast<int64_t>(whole.size()), 1, 1, 1};
  REQUIRE(store->commit(std::move(*s), version, hash.value()).is_ok());
  CHECK(cached_content(*store, 9, version) == whole);
  // A piece past its file's end fails (EIO), not a fault of the cache disk.
  auto other = store->begin_staging(10, 2000);
  REQUIRE(other.has_value());
  CHECK(copy_range(second.fd.get(), 4000, *other, 0, 2000, &fault).error_code() == EIO);
  CHECK_FALSE(fault);
  store->abort(std::move(*other), 0);
}

TEST_CASE("CacheStore evicts the least recently used unpinned copy", "[cache_store]") {
  Scratch t;
  const uint64_t block = block_size_of(t.cache());
  auto store = open_store(t.cache(), 4 * block);
  std::vector<Source> src;
  for (FileId id = 0; id <= 10; ++id) {
    src.push_back(make_source(t.src(), "f" + std::to_string(id), random_bytes(block, id)));
  }
  auto present = [&](FileId id) { return fs::exists(object_path(*store, id)); };

  for (FileId id = 1; id <= 4; ++id) {
    REQUIRE(stage(*store, id, src[id]));
  }
  CHECK(store->stats().used_bytes == 4 * block);
  CHECK(cached_content(*store, 1, src[1].version) == src[1].content);  // order: 2 3 4 1

  REQUIRE(stage(*store, 5, src[5]));  // evicts 2
  CacheStats st = store->stats();
  CHECK(st.evictions == 1);
  CHECK(st.used_bytes == 4 * block);
  CHECK(st.files_cached == 4);
  CHECK_FALSE(present(2));
  CHECK_FALSE(store->open_copy(2, src[2].version).has_value());
  CHECK((present(1) && present(3) && present(4) && present(5)));

  SECTION("a pinned copy is skipped") {
    auto fd3 = store->open_copy(3, src[3].version);  // pinned from here on
    REQUIRE(fd3.has_value());
    for (FileId id : {4, 1, 5}) {
      REQUIRE(cached_content(*store, id, src[id].version) == src[id].content);
    }
    // Order: 3 (pinned) 4 1 5.
    REQUIRE(stage(*store, 6, src[6]));
    CHECK(store->stats().evictions == 2);
    CHECK(present(3));
    CHECK_FALSE(present(4));

    // Everything pinned: no room.
    auto fd1 = store->open_copy(1, src[1].version);
    auto fd5 = store->open_copy(5, src[5].version);
    auto fd6 = store->open_copy(6, src[6].version);
    REQUIRE((fd1 && fd5 && fd6));
    CHECK_FALSE(store->begin_staging(7, block).has_value());
    st = store->stats();
    CHECK(st.skipped_no_room == 1);
    CHECK(st.evictions == 2);
    CHECK(st.used_bytes == 4 * block);
    CHECK(st.copies_in_flight == 0);
    CHECK((present(1) && present(3) && present(5) && present(6)));
    CHECK(read_all(fd3->get()) == src[3].content);

    for (FileId id : {3, 1, 5, 6}) {
      store->unpin(id);
    }
    // Unpinned, the oldest (3) goes.
    REQUIRE(stage(*store, 7, src[7]));
    CHECK(store->stats().evictions == 3);
    CHECK_FALSE(present(3));
    CHECK((present(1) && present(5) && present(6) && present(7)));
  }

  SECTION("a file bigger than the capacity is refused without evicting") {
    CHECK_FALSE(store->begin_staging(8, 4 * block + 1).has_value());
    st = store->stats();
    CHECK(st.skipped_no_room == 1);
    CHECK(st.evictions == 1);
    CHECK(st.used_bytes == 4 * block);
    CHECK((present(1) && present(3) && present(4) && present(5)));
    // Exactly the capacity fits, by evicting everything else.
    const Source whole = make_source(t.src(), "whole", random_bytes(4 * block, 99));
    REQUIRE(stage(*store, 9, whole));
    st = store->stats();
    CHECK(st.evictions == 5);
    CHECK(st.files_cached == 1);
    CHECK(st.used_bytes == 4 * block);
    CHECK(files_in(*store).size() == 1);
    CHECK(cached_content(*store, 9, whole.version) == whole.content);
  }
}

TEST_CASE("CacheStore never exceeds its capacity under concurrent staging", "[cache_store]") {
  Scratch t;
  const uint64_t block = block_size_of(t.cache());
  const uint64_t capacity = 64 * block;
  auto store = open_store(t.cache(), capacity);
  constexpr FileId kIds = 64;
  constexpr int kThreads = 8;
  constexpr int kIterations = 200;
  std::vector<Source> src;
  std::mt19937 size_rng(12345);
  for (FileId id = 0; id < kIds; ++id) {
    const size_t size = size_rng() % (6 * block + 1);
    src.push_back(make_source(t.src(), "d" + std::to_string(id % 4) + "/f" + std::to_string(id),
                              random_bytes(size, id)));
  }

  std::atomic<bool> done{false};
  uint64_t max_used = 0;
  uint64_t samples = 0;
  std::thread monitor([&] {
    while (!done.load()) {
      max_used = std::max(max_used, store->stats().used_bytes);
      ++samples;
      std::this_thread::yield();
    }
  });
  std::atomic<int> hits{0}, wrong_content{0}, commits{0}, aborts{0}, failures{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(1000 + w);
      for (int i = 0; i < kIterations; ++i) {
        const FileId id = rng() % kIds;
        const uint32_t op = rng() % 10;
        if (op < 4) {
          auto fd = store->open_copy(id, src[id].version);
          if (fd) {
            ++(read_all(fd->get()) == src[id].content ? hits : wrong_content);
            store->unpin(id);
          }
        } else if (op < 9) {
          auto s = store->begin_staging(id, src[id].content.size());
          if (!s) {
            continue;
          }
          bool fault = false;
          auto hash = copy_into(src[id].fd.get(), *s, &fault);
          if (!hash.is_ok()) {
            ++failures;
            store->abort(std::move(*s), fault ? hash.error_code() : 0);
          } else if (rng() % 5 == 0) {
            ++aborts;
            store->abort(std::move(*s), 0);
          } else if (store->commit(std::move(*s), src[id].version, hash.value()).is_ok()) {
            ++commits;
          } else {
            ++failures;
          }
        } else {
          store->drop(id);
        }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  done = true;
  monitor.join();

  CHECK(samples > 0);
  CHECK(max_used <= capacity);
  CHECK(failures == 0);
  CHECK(wrong_content == 0);
  CHECK(commits > 0);
  CHECK(hits > 0);
  const CacheStats st = store->stats();
  CHECK(st.evictions > 0);  // the capacity was actually contended
  CHECK(st.copies_in_flight == 0);
  CHECK(st.files_staged == static_cast<uint64_t>(commits.load()));
  CHECK(st.copies_aborted == static_cast<uint64_t>(aborts.load()));
  CHECK(st.used_bytes <= capacity);

  // What is on disk is within the capacity and is exactly what is charged.
  uint64_t on_disk = 0;
  int temp_files = 0;
  const auto files = files_in(*store);
  for (const auto& f : files) {
    on_disk += round_to_blocks(fs::file_size(f), block);
    temp_files += f.filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
  }
  CHECK(on_disk <= capacity);
  CHECK(on_disk == st.used_bytes);
  CHECK(files.size() == st.files_cached);
  CHECK(temp_files == 0);
  // And every copy left is served correctly.
  int served = 0;
  for (FileId id = 0; id < kIds; ++id) {
    if (auto c = cached_content(*store, id, src[id].version)) {
      served += *c == src[id].content ? 1 : 0;
    }
  }
  CHECK(static_cast<size_t>(served) == files.size());
}

TEST_CASE("CacheStore keeps a dropped copy readable until it is unpinned", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(100000, 3));
  REQUIRE(stage(*store, 1, src));
  auto fd = store->open_copy(1, src.version);
  REQUIRE(fd.has_value());

  store->drop(1);
  CHECK(store->stats().dropped_stale + store->stats().dropped_damaged == 1);
  CHECK(read_all(fd->get()) == src.content);
  // No new reader gets it, and it cannot be restaged while the old copy is pinned.
  CHECK_FALSE(store->open_copy(1, src.version).has_value());
  CHECK_FALSE(store->begin_staging(1, src.content.size()).has_value());

  store->unpin(1);
  CHECK_FALSE(fs::exists(object_path(*store, 1)));
  CHECK(files_in(*store).empty());
  CHECK(store->stats().used_bytes == 0);
  CHECK(store->stats().files_cached == 0);
  // The reader's fd still reads the right bytes from the unlinked inode.
  CHECK(read_all(fd->get()) == src.content);
  // A fresh copy can be staged now.
  REQUIRE(stage(*store, 1, src));
  CHECK(cached_content(*store, 1, src.version) == src.content);
}

TEST_CASE("CacheStore detects a copy deleted or truncated underneath", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(50000, 4));
  REQUIRE(stage(*store, 1, src));
  const fs::path obj = object_path(*store, 1);
  REQUIRE(fs::is_regular_file(obj));

  SECTION("deleted") { REQUIRE(::unlink(obj.c_str()) == 0); }
  SECTION("truncated") { REQUIRE(::truncate(obj.c_str(), 25000) == 0); }
  SECTION("emptied") { REQUIRE(::truncate(obj.c_str(), 0) == 0); }

  CHECK_FALSE(store->open_copy(1, src.version).has_value());
  CacheStats st = store->stats();
  CHECK(st.dropped_damaged == 1);
  CHECK(st.dropped_stale == 0);
  CHECK(st.used_bytes == 0);
  CHECK(st.files_cached == 0);
  CHECK_FALSE(fs::exists(obj));
  // Still a miss, not counted twice.
  CHECK_FALSE(store->open_copy(1, src.version).has_value());
  CHECK(store->stats().dropped_damaged == 1);
  // Staged again, it is served.
  REQUIRE(stage(*store, 1, src));
  CHECK(cached_content(*store, 1, src.version) == src.content);
}

TEST_CASE("CacheStore makes its directory again when it is deleted underneath", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source a = make_source(t.src(), "a", random_bytes(50000, 5));
  const Source b = make_source(t.src(), "b", random_bytes(30000, 6));
  const Source c = make_source(t.src(), "c", random_bytes(20000, 7));
  REQUIRE(stage(*store, 1, a));
  REQUIRE(stage(*store, 2, b));
  // a is being read while the directory goes: its reader keeps its bytes.
  auto held = store->open_copy(1, a.version);
  REQUIRE(held.has_value());
  fs::remove_all(store->path());

  // The next copy makes the directory again, with its lock, and the lost copies are forgotten.
  REQUIRE(stage(*store, 3, c));
  CHECK(fs::is_regular_file(fs::path(store->path()) / "lock"));
  CHECK(cached_content(*store, 3, c.version) == c.content);
  CHECK_FALSE(store->open_copy(2, b.version).has_value());
  CHECK(read_all(held->get()) == a.content);
  store->unpin(1);
  const CacheStats st = store->stats();
  CHECK(st.dropped_damaged == 2);
  CHECK(st.files_cached == 1);
  CHECK(st.used_bytes == round_to_blocks(c.content.size(), block_size_of(t.cache())));
  // Both lost files can be staged again.
  REQUIRE(stage(*store, 1, a));
  REQUIRE(stage(*store, 2, b));
  CHECK(cached_content(*store, 2, b.version) == b.content);
  CHECK(files_in(*store).size() == 3);
}

TEST_CASE("a copy whose directory is deleted before its rename is no disk fault", "[cache_store]") {
  // A cleaner removed the cache directory while a copy was being written: its rename fails
  // with ENOENT. Before, that paused staging for 30 s as an I/O fault of the disk.
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source a = make_source(t.src(), "a", random_bytes(50000, 8));
  const Source b = make_source(t.src(), "b", random_bytes(20000, 9));
  auto s = store->begin_staging(1, a.content.size());
  REQUIRE(s.has_value());
  bool fault = false;
  auto hash = copy_into(a.fd.get(), *s, &fault);
  REQUIRE(hash.is_ok());
  fs::remove_all(store->path());
  CHECK(store->commit(std::move(*s), a.version, hash.value()).error_code() == ENOENT);
  const CacheStats st = store->stats();
  CHECK(st.errors_io == 0);
  CHECK(st.copies_aborted == 1);
  // The directory is back at once, and the next copy is made there.
  CHECK(fs::is_regular_file(fs::path(store->path()) / "lock"));
  REQUIRE(stage(*store, 2, b));
  CHECK(store->stats().skipped_suspended == 0);
  CHECK(cached_content(*store, 2, b.version) == b.content);
}

TEST_CASE("CacheStore keeps a copy it cannot open for want of descriptors", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(50000, 4));
  REQUIRE(stage(*store, 1, src));
  {
    // Every descriptor below a low limit taken: the next open fails with EMFILE.
    struct rlimit old;
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);

    struct Restore {
      struct rlimit limit;

      ~Restore() { ::setrlimit(RLIMIT_NOFILE, &limit); }
    } restore{old};
    struct rlimit low = old;
    low.rlim_cur = 64;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    std::vector<UniqueFd> hog;
    while (true) {
      UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) {
        break;
      }
      hog.push_back(std::move(fd));
    }
    REQUIRE(errno == EMFILE);
    CHECK_FALSE(store->open_copy(1, src.version).has_value());
  }
  // The copy is the daemon's to serve again once descriptors are free: not counted damaged.
  CHECK(store->stats().dropped_damaged == 0);
  CHECK(store->stats().files_cached == 1);
  CHECK(cached_content(*store, 1, src.version) == src.content);
}

TEST_CASE("CacheStore bounds a copy's readers and a copy's size", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 50);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(5000, 4));
  REQUIRE(stage(*store, 1, src));
  // 65,535 readers at once (their descriptors closed, their pins kept); the next reads the
  // source, and the copy is neither dropped nor evictable while any pin is held.
  int pinned = 0;
  while (auto fd = store->open_copy(1, src.version)) {
    ++pinned;
    REQUIRE(pinned <= 65535);
  }
  CHECK(pinned == 65535);
  CHECK(store->stats().files_cached == 1);
  CHECK(store->stats().dropped_damaged == 0);
  store->unpin(1);
  CHECK(store->open_copy(1, src.version).has_value());  // one pin freed: one more reader
  for (int i = 0; i < pinned; ++i) {
    store->unpin(1);
  }
  CHECK(cached_content(*store, 1, src.version) == src.content);

  // A copy's size fits 44 bits: a larger file is not staged whole, and nothing is charged.
  const uint64_t used = store->stats().used_bytes;
  CHECK_FALSE(store->begin_staging(2, uint64_t{1} << 44).has_value());
  CHECK(store->stats().used_bytes == used);
  CHECK(store->stats().skipped_no_room == 1);
}

TEST_CASE("CacheStore abort removes the temporary file and frees the charge", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(300000, 5));

  SECTION("explicit abort after the copy") {
    auto s = store->begin_staging(1, src.content.size());
    REQUIRE(s.has_value());
    bool fault = false;
    REQUIRE(copy_into(src.fd.get(), *s, &fault).is_ok());
    CHECK(files_in(*store).size() == 1);  // the temporary file
    store->abort(std::move(*s), 0);
  }
  SECTION("explicit abort before any byte") {
    auto s = store->begin_staging(1, src.content.size());
    REQUIRE(s.has_value());
    store->abort(std::move(*s), 0);
  }
  SECTION("abandoned Staging") {
    auto s = store->begin_staging(1, src.content.size());
    REQUIRE(s.has_value());
    bool fault = false;
    REQUIRE(copy_into(src.fd.get(), *s, &fault).is_ok());
    s.reset();
  }
  SECTION("Staging replaced by move assignment") {
    auto s = store->begin_staging(1, src.content.size());
    REQUIRE(s.has_value());
    *s = Staging();
  }

  CHECK(files_in(*store).empty());  // only the lock file and fan-out directories remain
  const CacheStats st = store->stats();
  CHECK(st.used_bytes == 0);
  CHECK(st.copies_in_flight == 0);
  CHECK(st.copies_aborted == 1);
  CHECK(st.files_cached == 0);
  CHECK(st.errors_no_space + st.errors_io == 0);
  CHECK_FALSE(store->open_copy(1, src.version).has_value());
  // An abort without a cache fault does not suspend staging.
  REQUIRE(stage(*store, 1, src));
  CHECK(cached_content(*store, 1, src.version) == src.content);
  CHECK(store->stats().skipped_suspended == 0);
}

TEST_CASE("CacheStore tells a failing source from a failing cache disk", "[cache_store]") {
  Scratch t;
  auto store = open_store(t.cache(), uint64_t{1} << 30);
  const Source src = make_source(t.src(), "short.bin", random_bytes(10000, 6));

  // The source ends before the announced size (it shrank since it was stat'ed).
  auto s = store->begin_staging(1, 20000);
  REQUIRE(s.has_value());
  bool fault = true;
  auto r = copy_into(src.fd.get(), *s, &fault);
  CHECK_FALSE(r.is_ok());
  CHECK(r.error_code() == EIO);
  CHECK_FALSE(fault);
  store->abort(std::move(*s), 0);

  // The source cannot be read at all.
  UniqueFd write_only(::open((t.src() / "short.bin").c_str(), O_WRONLY | O_CLOEXEC));
  REQUIRE(write_only.valid());
  s = store->begin_staging(2, 100);
  REQUIRE(s.has_value());
  fault = true;
  r = copy_into(write_only.get(), *s, &fault);
  CHECK(r.error_code() == EBADF);
  CHECK_FALSE(fault);
  store->abort(std::move(*s), 0);

  const CacheStats st = store->stats();
  CHECK(st.copies_aborted == 2);
  CHECK(st.errors_no_space + st.errors_io == 0);
  CHECK(st.used_bytes == 0);
  CHECK(files_in(*store).empty());
  REQUIRE(stage(*store, 1, src));  // not suspended
  CHECK(store->stats().skipped_suspended == 0);
}

TEST_CASE("CacheStore suspends staging when the cache disk is full", "[cache_store][tmpfs]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: mounting a tmpfs needs root");
    return;
  }
  Scratch t;
  const fs::path root = t.base / "tmpfs";
  TmpfsMount mount(root, "size=256k");
  INFO("mount: " << strerror(mount.error()));
  REQUIRE(mount.mounted());
  auto store = open_store(root, uint64_t{1} << 40);  // far above the 256 KiB of the disk
  const uint64_t block = block_size_of(root);

  std::vector<Source> src;
  for (FileId id = 0; id < 4; ++id) {
    src.push_back(make_source(t.src(), "f" + std::to_string(id), random_bytes(8192, id)));
  }
  REQUIRE(stage(*store, 0, src[0]));
  REQUIRE(stage(*store, 1, src[1]));

  // A copy starts while there is room; then something else fills the disk.
  auto s = store->begin_staging(2, src[2].content.size());
  REQUIRE(s.has_value());
  UniqueFd filler(::open((root / "filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  REQUIRE(filler.valid());
  const std::string chunk(65536, 'f');
  int fill_errno = 0;
  for (int i = 0; i < 64 && fill_errno == 0; ++i) {
    if (::write(filler.get(), chunk.data(), chunk.size()) < 0) {
      fill_errno = errno;
    }
  }
  REQUIRE(fill_errno == ENOSPC);

  bool fault = false;
  auto r = copy_into(src[2].fd.get(), *s, &fault);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error_code() == ENOSPC);
  CHECK(fault);
  store->abort(std::move(*s), r.error_code());
  CacheStats st = store->stats();
  CHECK(st.errors_no_space == 1);
  CHECK(st.errors_io == 0);
  CHECK(st.copies_aborted == 1);
  CHECK(st.used_bytes == 2 * round_to_blocks(8192, block));
  CHECK(files_in(*store).size() == 2);  // the temporary file is gone

  // Staging is suspended; reads of what is cached go on.
  CHECK_FALSE(store->begin_staging(3, src[3].content.size()).has_value());
  st = store->stats();
  CHECK(st.skipped_suspended == 1);
  CHECK(st.skipped_no_room == 0);
  CHECK(st.copies_in_flight == 0);
  CHECK(cached_content(*store, 0, src[0].version) == src[0].content);
  CHECK(cached_content(*store, 1, src[1].version) == src[1].content);
  store.reset();  // before the unmount
}

TEST_CASE("CacheStore works on a filesystem that reports no inode counts", "[cache_store][tmpfs]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: mounting a tmpfs needs root");
    return;
  }
  Scratch t;
  const fs::path root = t.base / "tmpfs";
  TmpfsMount mount(root, "size=16m,nr_inodes=0");
  INFO("mount: " << strerror(mount.error()));
  REQUIRE(mount.mounted());
  struct statvfs vfs;
  REQUIRE(::statvfs(root.c_str(), &vfs) == 0);
  REQUIRE(vfs.f_files == 0);
  REQUIRE(vfs.f_blocks > 0);

  const uint64_t block = block_size_of(root);
  auto store = open_store(root, uint64_t{1} << 30);
  const Source src = make_source(t.src(), "a/b.jpg", random_bytes(100000, 8));
  REQUIRE(stage(*store, 1, src));
  CHECK(cached_content(*store, 1, src.version) == src.content);
  const CacheStats st = store->stats();
  CHECK(st.files_staged == 1);
  CHECK(st.used_bytes == round_to_blocks(100000, block));
  CHECK(st.skipped_no_room + st.skipped_suspended == 0);
  store.reset();
}

TEST_CASE("CacheStore keeps its capacity on a filesystem that reports no blocks",
          "[cache_store][tmpfs]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: mounting a tmpfs needs root");
    return;
  }
  Scratch t;
  const fs::path root = t.base / "tmpfs";
  TmpfsMount mount(root, "size=0,nr_inodes=0");  // unlimited: statvfs reports 0 blocks
  INFO("mount: " << strerror(mount.error()));
  REQUIRE(mount.mounted());
  struct statvfs vfs;
  REQUIRE(::statvfs(root.c_str(), &vfs) == 0);
  REQUIRE(vfs.f_blocks == 0);

  const uint64_t block = block_size_of(root);
  auto store = open_store(root, 2 * block, 0.5);
  std::vector<Source> src;
  for (FileId id = 0; id < 3; ++id) {
    src.push_back(make_source(t.src(), "f" + std::to_string(id), random_bytes(block, id)));
  }
  // The reserve cannot apply without a size; the configured capacity does.
  REQUIRE(stage(*store, 0, src[0]));
  REQUIRE(stage(*store, 1, src[1]));
  REQUIRE(stage(*store, 2, src[2]));
  const CacheStats st = store->stats();
  CHECK(st.evictions == 1);
  CHECK(st.used_bytes == 2 * block);
  CHECK_FALSE(store->open_copy(0, src[0].version).has_value());
  CHECK(cached_content(*store, 2, src[2].version) == src[2].content);
  store.reset();
}

TEST_CASE("CacheStore keeps the free-space reserve by evicting", "[cache_store][tmpfs]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: mounting a tmpfs needs root");
    return;
  }
  Scratch t;
  const fs::path root = t.base / "tmpfs";
  TmpfsMount mount(root, "size=256k");
  INFO("mount: " << strerror(mount.error()));
  REQUIRE(mount.mounted());
  auto store = open_store(root, uint64_t{1} << 40, 0.5);  // keep 128 KiB free
  const Source a = make_source(t.src(), "a", random_bytes(96 * 1024, 1));
  const Source b = make_source(t.src(), "b", random_bytes(96 * 1024, 2));
  const Source big = make_source(t.src(), "big", random_bytes(160 * 1024, 3));
  auto free_bytes = [&] {
    struct statvfs vfs;
    REQUIRE(::statvfs(root.c_str(), &vfs) == 0);
    return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  };

  REQUIRE(stage(*store, 1, a));
  CHECK(free_bytes() >= 128 * 1024);
  REQUIRE(stage(*store, 2, b));  // fits only by evicting a
  CHECK(store->stats().evictions == 1);
  CHECK(free_bytes() >= 128 * 1024);
  // Beyond what the disk can give while keeping the reserve.
  CHECK_FALSE(store->begin_staging(3, big.content.size()).has_value());
  CHECK(store->stats().skipped_no_room == 1);
  CHECK(store->stats().evictions == 1);  // refused without evicting b for nothing
  CHECK(cached_content(*store, 2, b.version) == b.content);
  store.reset();
}

// Staging reservations are not on disk yet, so statvfs does not see them: two copies started
// before either is written must not both be granted the same free space.
TEST_CASE("CacheStore keeps the free-space reserve against concurrent stagings",
          "[cache_store][tmpfs]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: mounting a tmpfs needs root");
    return;
  }
  Scratch t;
  const fs::path root = t.base / "tmpfs";
  TmpfsMount mount(root, "size=256k");
  INFO("mount: " << strerror(mount.error()));
  REQUIRE(mount.mounted());
  auto store = open_store(root, uint64_t{1} << 40, 0.5);  // keep 128 KiB free
  const Source a = make_source(t.src(), "a", random_bytes(96 * 1024, 1));
  const Source b = make_source(t.src(), "b", random_bytes(96 * 1024, 2));

  auto sa = store->begin_staging(1, a.content.size());
  REQUIRE(sa.has_value());
  auto sb = store->begin_staging(2, b.content.size());  // 192 KiB in all: no room
  const bool b_admitted = sb.has_value();
  for (auto* pair : {&sa, &sb}) {
    if (pair->has_value()) {
      bool fault = false;
      const Source& src = (*pair)->id() == 1 ? a : b;
      auto hash = copy_into(src.fd.get(), **pair, &fault);
      REQUIRE(hash.is_ok());
      REQUIRE(store->commit(std::move(**pair), src.version, hash.value()).is_ok());
    }
  }
  struct statvfs vfs;
  REQUIRE(::statvfs(root.c_str(), &vfs) == 0);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  CHECK(free_bytes >= 128 * 1024);
  CHECK_FALSE(b_admitted);
  store.reset();
}

// --- A stateful property test against a reference model (docs/reliability.md, M1) ---------------

namespace {

// One step of the sequence RapidCheck draws: kind, file, size in blocks.
enum class Step { kChangeSource, kStage, kOpen, kClose, kDrop };

struct ModelFile {
  Source source;  // the file as it is now in the source
  uint32_t generation = 0;
};

struct Reader {
  FileId id;
  UniqueFd fd;
  std::string expected;
};

// What the store must do, whatever it evicts: a hit is the source's current version byte for
// byte, a file never staged at this version is a miss, an open copy keeps its bytes until it
// is closed, and the disk space charged and used stays under the capacity.
void run_steps(const std::vector<std::tuple<uint8_t, uint8_t, uint8_t>>& steps) {
  constexpr FileId kFiles = 6;
  Scratch t;
  const uint64_t block = block_size_of(t.cache());
  const uint64_t capacity = 6 * block;
  auto store = open_store(t.cache(), capacity);
  std::vector<ModelFile> files(kFiles);
  std::vector<std::optional<uint32_t>> staged(kFiles);  // generation staged last, if any
  std::vector<Reader> readers;
  const auto rewrite = [&](FileId id, uint64_t blocks) {
    ModelFile& f = files[id];
    ++f.generation;
    const std::string rel = "f" + std::to_string(id);
    // A new inode each time: the version changes even within one clock tick.
    const Source fresh = make_source(t.src(), rel + ".new",
                                     random_bytes(blocks * block - 7, id * 1000 + f.generation));
    fs::rename(t.src() / (rel + ".new"), t.src() / rel);
    f.source.rel = rel;
    f.source.content = fresh.content;
    f.source.fd.reset(::open((t.src() / rel).c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    RC_ASSERT(::fstat(f.source.fd.get(), &st) == 0);
    f.source.version = FileVersion::of(st);
  };
  for (FileId id = 0; id < kFiles; ++id) {
    rewrite(id, 1 + id % 3);
  }
  for (const auto& [kind_byte, file_byte, size_byte] : steps) {
    const auto kind = static_cast<Step>(kind_byte % 5);
    const FileId id = file_byte % kFiles;
    ModelFile& f = files[id];
    switch (kind) {
      case Step::kChangeSource:
        rewrite(id, 1 + size_byte % 3);
        break;
      case Step::kStage:
        if (stage(*store, id, f.source)) {
          staged[id] = f.generation;
        }
        break;
      case Step::kOpen: {
        auto fd = store->open_copy(id, f.source.version);
        if (!fd) {
          break;
        }
        // Only a copy of this very version may be served.
        RC_ASSERT(staged[id] == std::optional<uint32_t>(f.generation));
        RC_ASSERT(read_all(fd->get()) == f.source.content);
        readers.push_back({id, std::move(*fd), f.source.content});
        break;
      }
      case Step::kClose:
        if (!readers.empty()) {
          Reader& r = readers.front();
          // Evictions and drops while it was open took nothing from it.
          RC_ASSERT(read_all(r.fd.get()) == r.expected);
          r.fd.reset();
          store->unpin(r.id);
          readers.erase(readers.begin());
        }
        break;
      case Step::kDrop:
        store->drop(id);
        staged[id].reset();
        break;
    }
    const CacheStats st = store->stats();
    RC_ASSERT(st.used_bytes <= capacity);
    uint64_t on_disk = 0;
    for (const auto& p : files_in(*store)) {
      on_disk += round_to_blocks(fs::file_size(p), block);
    }
    RC_ASSERT(on_disk <= capacity);
  }
  for (auto& r : readers) {
    RC_ASSERT(read_all(r.fd.get()) == r.expected);
    r.fd.reset();
    store->unpin(r.id);
  }
}

}  // namespace

TEST_CASE("CacheStore agrees with a reference model over random sequences", "[cache_store]") {
  rc::prop("hits are the current version, open copies keep their bytes, usage <= capacity", [] {
    const auto steps = *rc::gen::container<std::vector<std::tuple<uint8_t, uint8_t, uint8_t>>>(
        rc::gen::arbitrary<std::tuple<uint8_t, uint8_t, uint8_t>>());
    run_steps(steps);
  });
}

}  // namespace epochfs::cachestore
