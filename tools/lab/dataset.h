// Synthetic datasets for the demo, benchmarks and tests.
//
// An ImageNet-like tree: class directories holding files whose sizes follow a lognormal
// distribution around 110 KB (ImageNet-1k's mean JPEG size). Every 4 KiB block of every file
// starts with a text header naming the file id, version and offset, followed by pseudo-random
// bytes derived from the same three values; so a wrong byte read anywhere says where it came
// from, and any range of a file can be regenerated without reading it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cachestore/status.h"

namespace epochfs::tools {

inline constexpr size_t kContentBlockBytes = 4096;

struct DatasetSpec {
  size_t num_files = 1000;
  size_t num_classes = 10;
  double mean_file_bytes = 110 * 1024;  // ImageNet-1k train: ~110 KB per JPEG on average
  double sigma = 0.5;                   // lognormal shape; spread of JPEG sizes
  uint64_t seed = 1;
};

// Fills buf with bytes [offset, offset + len) of file `file_id` at `version`.
void fill_content(uint64_t file_id, uint32_t version, uint64_t offset, char* buf, size_t len);

// Writes a file of size bytes with that content, replacing any file at path.
cachestore::Status write_content_file(const std::string& path, uint64_t file_id, uint32_t version,
                                      uint64_t size);

// Creates the dataset under root (created if missing) and returns the relative paths in
// file-id order. If root already holds a dataset made from the same spec, reuses it.
cachestore::Result<std::vector<std::string>> make_dataset(const std::string& root,
                                                          const DatasetSpec& spec);

// xxHash64 of a whole file read with pread, or an error.
cachestore::Result<uint64_t> file_digest(const std::string& path);

}  // namespace epochfs::tools
