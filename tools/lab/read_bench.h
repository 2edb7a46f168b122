// Reading a list of files with N threads, as a data loader does: open, read whole, close.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epochfs::tools {

struct ReadFigures {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  double seconds = 0;

  double files_per_s() const { return seconds > 0 ? files / seconds : 0; }

  double mb_per_s() const { return seconds > 0 ? bytes / seconds / 1e6 : 0; }
};

// Writes back dirty pages and drops clean ones (needs root), so the next read of any file
// reaches its filesystem: the daemon, for a FUSE mount.
// With keep_metadata, only file pages go (drop_caches 1); dentries and inodes stay.
bool drop_page_cache(bool keep_metadata = false);

// Reads path whole through buf (any size); its size, or -1.
int64_t read_whole(const std::string& path, std::vector<char>& buf);

// Reads root/paths[i] for every i, each file whole, spread over `threads` threads.
ReadFigures read_files(const std::string& root, const std::vector<std::string>& paths,
                       unsigned threads);

}  // namespace epochfs::tools
