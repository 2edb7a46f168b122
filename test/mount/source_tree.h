// The source tree the mount tests overlay: every kind of entry a dataset directory may hold.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace epochfs::test {

struct SourceTreeOptions {
  size_t many_files = 10000;             // small files under many/
  uint64_t big_file_bytes = 200u << 20;  // one large file, big.bin
};

struct SourceTree {
  // Relative paths of every regular file, with sizes.
  std::map<std::string, uint64_t> files;
  // Regular files other users cannot read (mode 000).
  std::vector<std::string> unreadable;
};

// Builds under root: nested dirs, many small files, a big file, empty and 1-byte files, sizes
// at page and read-size boundaries +-1, symlinks pointing inside and outside, names with
// spaces and UTF-8, a FIFO, an unreadable file and an unreadable directory. Files named in
// `outside` are created next to root, as targets that links must not escape to.
SourceTree make_source_tree(const std::string& root, const SourceTreeOptions& options);

// Every path (files, dirs, links, fifo) below root, relative, sorted; the root is "".
std::vector<std::string> list_tree(const std::string& root);

}  // namespace epochfs::test
