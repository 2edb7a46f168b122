// The index a kept cache directory carries from one mount to the next (--keep-cache).
//
// Text, one copy per line, so a person can read it:
//   epochfs-cache-index 1
//   <xxh3-64 of the copy, 16 hex> <size> <mtime_ns> <ctime_ns> <ino> <dev> <escaped path>
//   end <number of copies> <xxh3-64 of every byte before this line, 16 hex>
// In the path, '\' is written "\\" and a newline "\n". The end line makes a cut-short or
// damaged index detectable: such an index is not used at all. docs/cache-format.md.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cachestore/cache_store.h"

namespace epochfs::cachestore {

inline constexpr int kIndexFormatVersion = 1;

std::string format_index(const std::vector<KeptCopy>& copies);

// nullopt if text is not a whole index of format version 1.
std::optional<std::vector<KeptCopy>> parse_index(const std::string& text);

}  // namespace epochfs::cachestore
