// Range orders (docs/semantics.md, "Range orders"): a single large file read by sample at
// random offsets, staged by blocks in the order its samples are read, and every read answered
// with the source's bytes whether its blocks are cached, in flight or not.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "cachestore/cache_dir.h"
#include "cachestore/unique_fd.h"
#include "prefetch/blocks.h"
#include "test/cachestore/page_cache.h"
#include "test/mount/mount_fixture.h"

namespace epochfs::test {
namespace {

constexpr uint64_t kBlock = uint64_t{1} << 20;

struct Sample {
  uint64_t offset;
  uint64_t length;
};

// A file of size random bytes at path; its bytes.
std::string make_big_file(const std::string& path, uint64_t size, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(size, '\0');
  for (auto& c : bytes) {
    c = static_cast<char>(rng());
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  return bytes;
}

// count samples of up to max_length bytes at random offsets of a file of size bytes, some
// crossing a block's end and one ending at the file's end.
std::vector<Sample> random_samples(uint64_t size, int count, uint64_t max_length, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> out;
  for (int i = 0; i < count - 1; ++i) {
    const uint64_t length = 1 + rng() % max_length;
    out.push_back({rng() % (size - length), length});
  }
  out.push_back({size - 100, 100});
  return out;
}

std::string range_order(const std::vector<Sample>& samples, const std::string& path,
                        const std::string& header = "") {
  std::string text = "#form ranges\n" + header;
  for (const auto& s : samples) {
    text += std::to_string(s.offset) + " " + std::to_string(s.length) + " " + path + "\n";
  }
  return text;
}

std::set<uint64_t> blocks_of(const std::vector<Sample>& samples) {
  std::set<uint64_t> blocks;
  for (const auto& s : samples) {
    for (uint64_t b = s.offset / kBlock; b <= (s.offset + s.length - 1) / kBlock; ++b) {
      blocks.insert(b);
    }
  }
  return blocks;
}

// Reads every sample through the mount with pread, in order; the number that differ from the
// source's bytes (or fail).
int read_samples(const std::string& path, const std::vector<Sample>& samples,
                 const std::string& expected) {
  cachestore::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  int wrong = 0;
  std::string buf;
  for (const auto& s : samples) {
    buf.resize(s.length);
    const ssize_t n = ::pread(fd.get(), buf.data(), s.length, static_cast<off_t>(s.offset));
    wrong +=
        n == static_cast<ssize_t>(s.length) && buf == expected.substr(s.offset, s.length) ? 0 : 1;
  }
  return wrong;
}

// Where the cache holds the copy of key (a source path, or a block's key); "" if nowhere.
std::string object_of(Mount& mount, const std::string& key) {
  const std::string name = cachestore::CacheDir::object_name(key);
  for (const auto& e : std::filesystem::recursive_directory_iterator(mount.cache_root())) {
    if (e.path().string().ends_with("/" + name)) {
      return e.path().string();
    }
  }
  return "";
}

// Where the cache holds block `block` of the source file at path; "" if nowhere.
std::string block_object(Mount& mount, const std::string& path, uint64_t block) {
  return object_of(mount, prefetch::block_key(path, block));
}

}  // namespace

TEST_CASE("a range order stages the blocks it names, and every sample reads the source's bytes",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 6 * kBlock + 12345;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 1);
  Mount mount(dir / "src", dir / "mnt");
  const auto samples = random_samples(kSize, 300, 20000, 2);
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  CHECK(stat_of(mount, "prefetch.last_publish.found") ==
        stat_of(mount, "prefetch.last_publish.looked_up"));
  wait_for_staging(mount);
  const auto blocks = blocks_of(samples);
  CHECK(stat_of(mount, "cache.files_cached") == blocks.size());
  CHECK(stat_of(mount, "cache.bytes_staged") == kSize);  // every block named, the last short
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  // Staged ahead: no sample's bytes came from the source.
  CHECK(stat_of(mount, "bytes_from_source") == 0);
  CHECK(stat_of(mount, "block_misses") == 0);
  CHECK(stat_of(mount, "block_hits") > 0);
  // Whole, through plain reads too.
  CHECK(read_file(mount / "data.bin") == bytes);
  // The classic data path reads blocks as fast as a whole copy: none is made.
  CHECK(stat_of(mount, "joined_copies") == 0);
}

// Samples in every one of a file's blocks, then at random.
std::vector<Sample> samples_in_every_block(uint64_t size, uint32_t seed) {
  std::vector<Sample> samples;
  for (uint64_t b = 0; b * kBlock < size; ++b) {
    samples.push_back({b * kBlock, 100});
  }
  const auto more = random_samples(size, 100, 20000, seed);
  samples.insert(samples.end(), more.begin(), more.end());
  return samples;
}

// A mount with passthrough whose data.bin, six blocks with the last short, has every block
// cached by a range order of samples in each.
struct SixBlocksCached {
  static constexpr uint64_t kSize = 5 * kBlock + 777;

  SixBlocksCached(uint32_t seed, const std::vector<std::string>& more_args = {})
      : bytes(make_big_file(dir / "src/data.bin", kSize, seed)),
        mount(dir / "src", dir / "mnt", with_passthrough(more_args)),
        samples(samples_in_every_block(kSize, seed + 1)) {
    REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
    wait_for_staging(mount);
    REQUIRE(stat_of(mount, "cache.files_cached") == 6);
  }

  static std::vector<std::string> with_passthrough(std::vector<std::string> args) {
    args.insert(args.begin(), {"--data-path", "passthrough"});
    return args;
  }

  TempDir dir;
  const std::string bytes;
  Mount mount;
  const std::vector<Sample> samples;
};

TEST_CASE("with passthrough a file whose blocks are all cached is read from a copy of it whole",
          "[mount][ranges]") {
  SKIP_WITHOUT_PASSTHROUGH();
  SixBlocksCached six(31);
  constexpr uint64_t kSize = SixBlocksCached::kSize;
  const std::string& bytes = six.bytes;
  const auto& samples = six.samples;
  Mount& mount = six.mount;
  TempDir& dir = six.dir;
  // Read by blocks; its close joins them.
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  REQUIRE(wait_for_stat(mount, "joined_copies", 1) == 1);
  CHECK(stat_of(mount, "joined_bytes") == kSize);
  CHECK(stat_of(mount, "cache.files_cached") == 7);
  CHECK(stat_of(mount, "bytes_from_source") == 0);
  const double block_hits = stat_of(mount, "block_hits");
  const double hits = stat_of(mount, "hits");
  const double passthrough_opens = stat_of(mount, "data_path.passthrough_opens");
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(read_file(mount / "data.bin") == bytes);
  CHECK(stat_of(mount, "block_hits") == block_hits);  // no read came by blocks
  CHECK(stat_of(mount, "hits") == hits + 2);
  CHECK(stat_of(mount, "data_path.passthrough_opens") == passthrough_opens + 2);
  // The next epoch's blocks are not read ahead: their readers read the whole copy.
  const double read_ahead = stat_of(mount, "cache.read_ahead");
  REQUIRE(publish(mount, range_order(samples, "data.bin", "#epoch 1\n")) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.read_ahead") == read_ahead);
  // Changed on the source: the whole copy is of the old version, never served again.
  const std::string changed = make_big_file(dir / "src/data.bin", kSize, 33);
  CHECK(read_file(mount / "data.bin") == changed);
  CHECK(read_samples(mount / "data.bin", samples, changed) == 0);
  CHECK(stat_of(mount, "hits") == hits + 2);
}

TEST_CASE("a whole copy is joined from blocks only into free room", "[mount][ranges]") {
  SKIP_WITHOUT_PASSTHROUGH();
  SixBlocksCached six(34, {"--cache-size", "9M"});  // room for the blocks, not a second copy
  const std::string& bytes = six.bytes;
  const auto& samples = six.samples;
  Mount& mount = six.mount;
  const double no_room = stat_of(mount, "cache.skipped_no_room");
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(wait_for_stat(mount, "cache.skipped_no_room", no_room + 1) == no_room + 1);
  CHECK(stat_of(mount, "joined_copies") == 0);
  CHECK(stat_of(mount, "cache.evictions") == 0);
  CHECK(stat_of(mount, "cache.files_cached") == 6);
  // Opened again, past the 0.2 s between tries: by blocks still (the kernel's pages of the
  // first open answer the reads), and the blocks are not scanned again for 10 s.
  ::usleep(300'000);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.skipped_no_room") == no_room + 1);
  CHECK(stat_of(mount, "hits") == 0);
  CHECK(stat_of(mount, "data_path.passthrough_opens") == 0);
}

TEST_CASE("a join that fails commits nothing and the file is read right", "[mount][ranges]") {
  SKIP_WITHOUT_PASSTHROUGH();
  SixBlocksCached six(36);
  const std::string& bytes = six.bytes;
  const auto& samples = six.samples;
  Mount& mount = six.mount;
  // The last block's copy cut short behind the daemon: copying it into the whole copy fails.
  // Read samples of the other blocks only.
  REQUIRE(::truncate(block_object(mount, "data.bin", 5).c_str(), 0) == 0);
  std::vector<Sample> early;
  for (const auto& sample : samples) {
    if (sample.offset + sample.length <= 5 * kBlock) {
      early.push_back(sample);
    }
  }
  const double aborted = stat_of(mount, "cache.copies_aborted");
  CHECK(read_samples(mount / "data.bin", early, bytes) == 0);
  CHECK(wait_for_stat(mount, "cache.copies_aborted", aborted + 1) == aborted + 1);
  CHECK(stat_of(mount, "joined_copies") == 0);
  CHECK(stat_of(mount, "cache.files_cached") == 5);  // the damaged block, found and dropped
  // Read right, and the block staged again; the join is not tried again for 10 s, though
  // it would succeed now: whatever failed may fail the same way at every close.
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == 6);
  ::usleep(300'000);  // past the 0.2 s between tries
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "joined_copies") == 0);
  CHECK(read_file(mount / "data.bin") == bytes);
}

TEST_CASE("copies of one file's blocks share its open on the source", "[mount][ranges]") {
  // Each block's copy opened the file again: an epoch of a 100 MB file made 100 opens of one
  // file on the source. Two copies at a time, so that at most two start before the first open
  // is held; the held open is renewed once a second.
  constexpr uint64_t kBlocks = 24;
  TempDir dir;
  const std::string bytes = make_big_file(dir / "src/data.bin", kBlocks * kBlock, 9);
  SlowSource slow(dir / "src", dir / "slow", 1);
  Mount mount(slow.path(), dir / "mnt", {"--stage-threads", "2", "--lookahead", "64"});
  std::vector<Sample> samples;
  for (uint64_t b = kBlocks; b-- > 0;) {
    samples.push_back({b * kBlock + 1000, 4096});
  }
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == kBlocks);
  CHECK(slow.opens("data.bin") <= kBlocks / 3);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(stat_of(mount, "block_hits") == kBlocks);
}

TEST_CASE("a block's copy asks for its source's reads ahead of them", "[mount][ranges]") {
  // Read one chunk at a time, a block's copy waited for the source's latency once per
  // kernel readahead window, one after another. One copy at a time, so that every read
  // waiting at once is one copy's.
  constexpr uint64_t kBlocks = 3;
  TempDir dir;
  make_big_file(dir / "src/data.bin", kBlocks * kBlock, 10);
  SlowSource slow(dir / "src", dir / "slow", 5);
  Mount mount(slow.path(), dir / "mnt", {"--stage-threads", "1", "--lookahead", "64"});
  std::vector<Sample> samples;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    samples.push_back({b * kBlock + 1000, 4096});
  }
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == kBlocks);
  CHECK(slow.most_reads() >= 6);
}

TEST_CASE("a read spanning two blocks is a use of the block holding its middle only",
          "[mount][ranges]") {
  // The kernel reads around a page fault, 128 KiB centred on it: near a block's end, that
  // READ spans the next block too. Counting both would consume the other block's next entry.
  TempDir dir;
  constexpr uint64_t kSize = 3 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 9);
  Mount mount(dir / "src", dir / "mnt");
  // Blocks 1, 0, then 2.
  const std::vector<Sample> samples = {{kBlock + 5000, 100}, {10, 100}, {2 * kBlock + 10, 100}};
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  const std::string position = "prefetch.streams.default.position";
  // 8,000 bytes from 1,000 before block 1: most of them, and the middle, in block 1.
  CHECK(read_samples(mount / "data.bin", {{kBlock - 1000, 8000}}, bytes) == 0);
  CHECK(stat_of(mount, position) == 1);
  CHECK(read_samples(mount / "data.bin", {samples[1]}, bytes) == 0);
  CHECK(stat_of(mount, position) == 2);
}

TEST_CASE("cached blocks an order will read are read into the page cache ahead of the reader",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 6 * kBlock + 12345;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 21);
  constexpr int kFiles = 20;
  write_files(dir / "src/small", kFiles, 10000);
  Mount mount(dir / "src", dir / "mnt", {"--lookahead", "50"});
  struct statfs fs;
  REQUIRE(::statfs(mount.cache_root().c_str(), &fs) == 0);
  if (fs.f_type == TMPFS_MAGIC) {
    WARN("SKIPPED: the cache is on tmpfs, whose pages cannot be dropped to be read again");
    return;
  }
  const auto samples = random_samples(kSize, 120, 20000, 22);
  auto files_order = [&](int epoch) {
    std::string text = "#form paths\n#stream files\n#epoch " + std::to_string(epoch) + "\n";
    for (int i = 0; i < kFiles; ++i) {
      text += "small/f" + std::to_string(i) + "\n";
    }
    return text;
  };
  REQUIRE(publish(mount, files_order(0)) == 0);
  REQUIRE(publish(mount, range_order(samples, "data.bin", "#epoch 0\n")) == 0);
  wait_for_staging(mount);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  std::vector<std::string> blocks, files;
  for (int i = 0; i < kFiles; ++i) {
    CHECK(read_file(mount / ("small/f" + std::to_string(i))));
    files.push_back(object_of(mount, "small/f" + std::to_string(i)));
  }
  for (uint64_t b = 0; b < 6; ++b) {
    blocks.push_back(block_object(mount, "data.bin", b));
  }
  auto resident_in = [](const std::vector<std::string>& objects) {
    size_t pages = 0;
    for (const auto& object : objects) {
      pages += resident_pages(object);
    }
    return pages;
  };
  // Every copy's pages dropped (again while epoch 0's reads ahead still land): only a read
  // ahead brings them back, though epoch 0's asked for them less than a second ago.
  wait_for_staging(mount);
  for (const auto& object : files) {
    REQUIRE(!object.empty());
    drop_pages(object);
  }
  for (int i = 0; i < 20 && resident_in(blocks) > 0; ++i) {
    for (const auto& object : blocks) {
      REQUIRE(!object.empty());
      drop_pages(object);
    }
    ::usleep(100'000);
  }
  REQUIRE(resident_in(blocks) == 0);
  const double before = stat_of(mount, "cache.read_ahead");
  REQUIRE(publish(mount, files_order(1)) == 0);
  REQUIRE(publish(mount, range_order(samples, "data.bin", "#epoch 1\n")) == 0);
  CHECK(wait_for_stat(mount, "cache.read_ahead", before + 2) >= before + 2);
  // Whole blocks, not a first piece of each (the kernel reads 128 KiB a call at most here).
  constexpr size_t kBlockPages = kBlock / 4096;
  for (int i = 0; i < 100 && resident_in(blocks) < 2 * kBlockPages; ++i) {
    ::usleep(50'000);  // asked for: the disk answers when it does
  }
  CHECK(resident_in(blocks) >= 2 * kBlockPages);
  // Small whole files are read whole at their open: never asked for ahead.
  CHECK(resident_in(files) == 0);
  // A block is asked for once per entry the window passes: within the two epochs' entries.
  CHECK(stat_of(mount, "cache.read_ahead") <= 2.0 * static_cast<double>(samples.size()));
}

TEST_CASE("a cached block is read into the page cache whole as it is read", "[mount][ranges]") {
  // No order left to pass the block: only its reader's READ asks for the rest of its pages.
  TempDir dir;
  constexpr uint64_t kSize = 2 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 23);
  Mount mount(dir / "src", dir / "mnt");
  struct statfs fs;
  REQUIRE(::statfs(mount.cache_root().c_str(), &fs) == 0);
  if (fs.f_type == TMPFS_MAGIC) {
    WARN("SKIPPED: the cache is on tmpfs, whose pages cannot be dropped to be read again");
    return;
  }
  const std::vector<Sample> samples = {{100, 100}, {kBlock + 100, 100}};
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);  // the order ends
  const std::string block = block_object(mount, "data.bin", 0);
  REQUIRE(!block.empty());
  ::usleep(1'100'000);  // past the second within which a block is not asked for again
  drop_pages(block);
  drop_pages(mount / "data.bin");
  REQUIRE(resident_pages(block) == 0);
  const double before = stat_of(mount, "cache.read_ahead");
  CHECK(read_samples(mount / "data.bin", {{kBlock - 4096, 100}}, bytes) == 0);
  CHECK(stat_of(mount, "cache.read_ahead") == before + 1);
  // More than the kernel's READ (128 KiB at most) asked for; the disk answers when it does.
  constexpr size_t kReadPages = (128 << 10) / 4096;
  for (int i = 0; i < 100 && resident_pages(block) <= 2 * kReadPages; ++i) {
    ::usleep(50'000);
  }
  CHECK(resident_pages(block) > 2 * kReadPages);
}

TEST_CASE("orders of indices into a manifest of ranges stage their samples' blocks",
          "[mount][ranges]") {
  // The compact form: the ranges once, then each epoch's order as sample indices.
  TempDir dir;
  constexpr uint64_t kSize = 5 * kBlock + 999;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 9);
  Mount mount(dir / "src", dir / "mnt");
  const auto samples = random_samples(kSize, 400, 20000, 10);
  REQUIRE(publish(mount, range_order(samples, "data.bin"), "manifest") == 0);
  std::vector<size_t> order(samples.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  std::string text = "#form indices\n";
  std::vector<Sample> in_order;
  std::set<uint64_t> first_blocks;
  for (size_t i : order) {
    text += std::to_string(i) + "\n";
    in_order.push_back(samples[i]);
    first_blocks.insert(samples[i].offset / kBlock);
  }
  REQUIRE(publish(mount, text) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == first_blocks.size());
  CHECK(read_samples(mount / "data.bin", in_order, bytes) == 0);
  CHECK(stat_of(mount, "block_hits") > 0);
}

TEST_CASE("an index order stages every block of a manifest range that crosses block ends",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 6 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 12);
  Mount mount(dir / "src", dir / "mnt");
  // Two samples in block 0, one from block 2 through block 4.
  const std::vector<Sample> samples = {{10, 500}, {9000, 700}, {2 * kBlock + 100, 2 * kBlock}};
  REQUIRE(publish(mount, range_order(samples, "data.bin"), "manifest") == 0);
  REQUIRE(publish(mount, "#form indices\n2\n0\n1\n") == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == blocks_of(samples).size());  // 0, 2, 3, 4
  CHECK(read_samples(mount / "data.bin", {samples[2], samples[0], samples[1]}, bytes) == 0);
  CHECK(stat_of(mount, "block_misses") == 0);
  CHECK(stat_of(mount, "bytes_from_source") == 0);
}

TEST_CASE("a file read by blocks with none cached is read from the source and then cached",
          "[mount][ranges]") {
  // The order names the blocks, but staging has no room until the reader comes: --lookahead 1
  // stages one block ahead; every other block is a miss, read from the source and copied.
  TempDir dir;
  constexpr uint64_t kSize = 4 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 3);
  Mount mount(dir / "src", dir / "mnt", {"--lookahead", "1"});
  const auto samples = random_samples(kSize, 200, 3000, 4);
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_cached") == blocks_of(samples).size());
  // The same samples again: all from the cache (the kernel's pages dropped first).
  drop_pages(mount / "data.bin");
  const double misses = stat_of(mount, "block_misses");
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(stat_of(mount, "block_misses") == misses);
}

TEST_CASE("a read of a block whose copy is under way waits for that copy, counted",
          "[mount][ranges]") {
  // Each source read takes 300 ms, opens none: the copy's reads are still running when the
  // reader's open is done and its first READ comes. At 1.1 s a read, a copy's first 256 KiB
  // chunk (two reads) takes longer than the 2 s after which a waiter gives up on a copy that
  // shows no progress: its reads must count as progress.
  const double latency_ms = GENERATE(300.0, 1100.0);
  INFO("source read latency " << latency_ms << " ms");
  TempDir dir;
  const std::string bytes = make_big_file(dir / "src/data.bin", 2 * kBlock, 21);
  SlowSource slow(dir / "src", dir / "slow", latency_ms, 64, {"--open-latency-ms", "0"});
  Mount mount(slow.path(), dir / "mnt");
  const std::vector<Sample> samples = {{1000, 4096}};
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  for (int i = 0; i < 500 && stat_of(mount, "cache.copies_in_flight") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(stat_of(mount, "cache.copies_in_flight") == 1);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(stat_of(mount, "block_waits") >= 1);
  CHECK(stat_of(mount, "block_stall_seconds") > 0);
  CHECK(stat_of(mount, "block_misses") == 0);  // the copy's bytes, not a second source read
  CHECK(stat_of(mount, "block_hits") >= 1);
}

TEST_CASE("a block copy that fails under a reader is replaced by the source's bytes",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 3 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 13);
  Mount mount(dir / "src", dir / "mnt");
  const std::vector<Sample> samples = {{kBlock + 100, 5000}, {kBlock + 400000, 5000}};
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  const std::string object = block_object(mount, "data.bin", 1);
  REQUIRE(!object.empty());
  cachestore::UniqueFd fd(::open((mount / "data.bin").c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  const auto read_sample = [&](const Sample& s) {
    std::string got(s.length, '\0');
    REQUIRE(::pread(fd.get(), got.data(), s.length, static_cast<off_t>(s.offset)) ==
            static_cast<ssize_t>(s.length));
    return got == bytes.substr(s.offset, s.length);
  };
  CHECK(read_sample(samples[0]));
  CHECK(stat_of(mount, "block_hits") >= 1);
  // The copy loses all but its first 1,000 bytes while the file is open and the copy held.
  REQUIRE(::truncate(object.c_str(), 1000) == 0);
  REQUIRE(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) == 0);
  CHECK(read_sample(samples[1]));
  CHECK(stat_of(mount, "cache.dropped_damaged") == 1);
}

TEST_CASE("blocks kept with --keep-cache serve the next mount", "[mount][ranges][keep]") {
  TempDir dir;
  constexpr uint64_t kSize = 3 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 21);
  const std::vector<std::string> keep = {"--cache-dir", dir / "cache", "--keep-cache"};
  const std::vector<Sample> samples = {{100, 5000}, {kBlock + 100, 5000}, {2 * kBlock + 9, 50}};
  {
    Mount mount(dir / "src", dir / "mnt", keep);
    REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
    wait_for_staging(mount);
    REQUIRE(stat_of(mount, "cache.files_cached") == 3);
  }
  Mount mount(dir / "src", dir / "mnt", keep);
  CHECK(stat_of(mount, "cache.files_cached") == 3);
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
  CHECK(stat_of(mount, "block_misses") == 0);
}

TEST_CASE("epochfs verify drops a damaged block copy and the pages read from it",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 2 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 22);
  Mount mount(dir / "src", dir / "mnt");
  const std::vector<Sample> samples = {{kBlock + 4096, 4096}};
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  const std::string object = block_object(mount, "data.bin", 1);
  REQUIRE(!object.empty());
  {
    std::fstream f(object, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 10);
    f.put(static_cast<char>(~bytes[kBlock + 4096 + 10]));  // same size, one byte different
  }
  // Read before any check: the damaged byte reaches the kernel's pages.
  REQUIRE(read_samples(mount / "data.bin", samples, bytes) == 1);
  const CommandResult r = run_epochfs({"verify", mount.path()});
  CHECK(contains(r.output, "damaged"));
  CHECK(read_samples(mount / "data.bin", samples, bytes) == 0);
}

TEST_CASE("a file read by blocks that changes in the source is never served stale",
          "[mount][ranges]") {
  TempDir dir;
  constexpr uint64_t kSize = 3 * kBlock;
  const std::string old_bytes = make_big_file(dir / "src/data.bin", kSize, 5);
  Mount mount(dir / "src", dir / "mnt");
  const auto samples = random_samples(kSize, 100, 5000, 6);
  REQUIRE(publish(mount, range_order(samples, "data.bin")) == 0);
  wait_for_staging(mount);
  CHECK(read_samples(mount / "data.bin", samples, old_bytes) == 0);
  // Rewritten in place: same size, other bytes, a new mtime and ctime.
  const std::string new_bytes = make_big_file(dir / "src/data.bin", kSize, 7);
  // The next epoch's order, published after the change (the attribute timeout lapses).
  ::sleep(2);
  REQUIRE(publish(mount, range_order(samples, "data.bin", "#epoch 1\n")) == 0);
  CHECK(read_samples(mount / "data.bin", samples, new_bytes) == 0);
}

TEST_CASE("bad range orders are refused or skipped with the reason, and charged to their user",
          "[mount][ranges][input]") {
  TempDir dir;
  make_big_file(dir / "src/data.bin", 2 * kBlock, 8);
  Mount mount(dir / "src", dir / "mnt", {"--max-entries-per-user", "1000"});
  // Each bad line is skipped and counted, the good one published.
  const std::string bad =
      "#form ranges\n"
      "-5 10 data.bin\n"
      "10 -5 data.bin\n"
      "18446744073709551615 10 data.bin\n"
      "10 0 data.bin\n"
      "10 2000000000 data.bin\n"
      "10 10\n"
      "10 10 ../outside\n"
      "ten 10 data.bin\n"
      "0 4096 data.bin\n";
  REQUIRE(publish(mount, bad) == 0);
  CHECK(stat_of(mount, "prefetch.last_publish.accepted") == 1);
  CHECK(stat_of(mount, "prefetch.last_publish.rejected") == 8);
  // A range past the file's end is rejected when the planner reaches it, as a missing file.
  REQUIRE(publish(mount, "#form ranges\n#stream eof\n" + std::to_string(5 * kBlock) +
                             " 10 data.bin\n") == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "prefetch.streams.eof.rejected_entries") == 1);
  // Many blocks: each is an entry, against the user's entry limit.
  std::string many = "#form ranges\n#epoch 2\n";
  for (int i = 0; i < 2000; ++i) {
    many += std::to_string(uint64_t(i) * kBlock) + " 1 data.bin\n";
  }
  CHECK(publish(mount, many) != 0);
  // A million tiny samples in one block are one entry.
  std::string tiny = "#form ranges\n#epoch 2\n";
  for (int i = 0; i < 100000; ++i) {
    tiny += std::to_string(i * 8) + " 8 data.bin\n";
  }
  CHECK(publish(mount, tiny) == 0);
  CHECK(stat_of(mount, "prefetch.last_publish.accepted") == 1);
}

TEST_CASE("a block read all through an epoch displaces no cached block that is read again",
          "[mount][ranges]") {
  // A file three times the cache, read by samples at random through two epochs published at
  // once: every block is used alike through each epoch, so swapping an uncached block for a
  // cached one would save no source read and cost the victim's again (docs/design.md, "Files
  // read by blocks").
  TempDir dir;
  constexpr uint64_t kSize = 12 * kBlock;
  const std::string bytes = make_big_file(dir / "src/data.bin", kSize, 41);
  Mount mount(dir / "src", dir / "mnt", {"--cache-size", "4M"});
  const auto epoch0 = random_samples(kSize, 1200, 4000, 42);
  const auto epoch1 = random_samples(kSize, 1200, 4000, 43);
  REQUIRE(publish(mount, range_order(epoch0, "data.bin", "#epoch 0\n")) == 0);
  REQUIRE(publish(mount, range_order(epoch1, "data.bin", "#epoch 1\n")) == 0);
  CHECK(read_samples(mount / "data.bin", epoch0, bytes) == 0);
  wait_for_staging(mount);
  // The stream kept pace with the reader: a block's 100 reads an epoch did not use up its 16
  // entries, and the queued epoch with them, early in the first.
  const auto stream = [&](const std::string& key) {
    return stat_of(mount, "prefetch.streams.default." + key);
  };
  if (stream("epoch") == 0) {
    CHECK(stream("epochs_queued") == 1);
  } else {
    CHECK(stream("position") < stream("epoch_length") / 4);
  }
  const double staged = stat_of(mount, "cache.bytes_staged");
  const double evictions = stat_of(mount, "cache.evictions");
  CHECK(stat_of(mount, "cache.files_cached") >= 3);
  drop_pages(mount / "data.bin");  // the next epoch's reads come to the daemon again
  CHECK(read_samples(mount / "data.bin", epoch1, bytes) == 0);
  wait_for_staging(mount);
  INFO("epoch 1 staged " << stat_of(mount, "cache.bytes_staged") - staged << " bytes, evicted "
                         << stat_of(mount, "cache.evictions") - evictions);
  // Near the epoch's end, blocks done with it have no known future and may be displaced: a
  // few. Belady's rule swapped ~40 blocks here, and counting each READ as an entry ~500.
  CHECK(stat_of(mount, "cache.bytes_staged") - staged <= 4.0 * kBlock);
  CHECK(stat_of(mount, "cache.evictions") - evictions <= 4);
}

}  // namespace epochfs::test
