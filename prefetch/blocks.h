// Blocks: how a byte range of a large source file becomes something the engine stages, caches,
// evicts and matches against reads, by the same known order as whole files.
//
// A single-file dataset (LMDB, HDF5, .npy, TFRecord) is read by sample at random offsets. A
// range order (`#form ranges`, docs/semantics.md) names, per sample, the bytes it reads; each
// range is cut into aligned blocks of kBlockBytes, and each block is a registry entry of its
// own under a key no source path can have: the file's path, `//`, the block's number ("a.h5//7").
// A normalised relative path never holds `//`, so a block key never names a real file. Every
// part of the engine that works per FileId (the schedule, next-use eviction, flights, the cache
// store, verify) then works per block unchanged: a block's cached copy is a cache object of its
// own, at most kBlockBytes long, whose version is the source file's with the block's length.
// The publisher's opens of the file then serve reads block by block (Engine::read_blocks;
// who reads which file so: prefetch/block_readers.h).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cachestore/file_version.h"

namespace epochfs::prefetch {

// Block size: large enough that a block costs one source round trip per megabyte and one cache
// object (a few hundred bytes of daemon memory), small enough that a file four times the cache
// still moves through it in thousands of independent pieces.
inline constexpr uint64_t kBlockBytes = uint64_t{1} << 20;

// The longest range one entry may name (1 GiB: 1,024 blocks); a sample is far smaller.
inline constexpr uint64_t kMaxRangeBytes = uint64_t{1} << 30;

// One entry of a range order: length bytes of path at offset.
struct Range {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string_view path;  // normalised, relative

  uint64_t first_block() const { return offset / kBlockBytes; }

  uint64_t last_block() const { return (offset + length - 1) / kBlockBytes; }
};

// A READ of a file read by blocks: each block it covers is used by the bytes it reads of it,
// and the block holding its middle by one sample at least if the READ is fresh.
struct BlockUse {
  uint64_t block;  // holding the READ's middle
  bool fresh;      // it does not continue the handle's last READ

  // The READ starts a use of block b (Planner::on_block_read's `fresh`).
  bool fresh_for(uint64_t b) const { return fresh && b == block; }
};

// Parses "OFFSET LENGTH PATH" (decimal numbers, blanks between, the path the rest of the line,
// not yet normalised); nullopt with the reason in *why if it is not one, the length is 0 or
// over kMaxRangeBytes, or the range ends past 2^62.
std::optional<Range> parse_range(std::string_view text, const char** why);

// "OFFSET LENGTH PATH" for a parsed range with its normalised path.
std::string format_range(uint64_t offset, uint64_t length, std::string_view path);

// The registry key of path's block number block.
std::string block_key(std::string_view path, uint64_t block);

// A block key taken apart; nullopt for any other registry path. The path is a copy, so a
// parsed key outlives the string it came from.
struct BlockOf {
  std::string path;
  uint64_t block = 0;
};

std::optional<BlockOf> parse_block_key(std::string_view key);

// The version of block of a file at version file: the file's, with the block's length as its
// size (0 past the end). A change of the file changes its mtime or ctime, hence every block's.
cachestore::FileVersion block_version(const cachestore::FileVersion& file, uint64_t block);

}  // namespace epochfs::prefetch
