#include "tools/lab/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <xxhash.h>

#include "cachestore/root_dir.h"
#include "cachestore/unique_fd.h"

namespace epochfs::tools {

using cachestore::Result;
using cachestore::Status;
using cachestore::UniqueFd;

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void fill_block(uint64_t file_id, uint32_t version, uint64_t block_offset, char* block) {
  uint64_t state = file_id * 0x100000001B3ULL ^ (uint64_t{version} << 48) ^ block_offset;
  for (size_t i = 0; i < kContentBlockBytes; i += 8) {
    const uint64_t v = splitmix64(state);
    memcpy(block + i, &v, 8);
  }
  snprintf(block, 96, "epochfs file=%llu version=%u offset=%llu\n",
           static_cast<unsigned long long>(file_id), version,
           static_cast<unsigned long long>(block_offset));
}

std::string spec_text(const DatasetSpec& s) {
  return "files=" + std::to_string(s.num_files) + " classes=" + std::to_string(s.num_classes) +
         " mean=" + std::to_string(s.mean_file_bytes) + " sigma=" + std::to_string(s.sigma) +
         " seed=" + std::to_string(s.seed) + "\n";
}

std::vector<std::string> dataset_paths(const DatasetSpec& spec) {
  std::vector<std::string> paths;
  paths.reserve(spec.num_files);
  char name[64];
  for (size_t i = 0; i < spec.num_files; ++i) {
    snprintf(name, sizeof(name), "class_%04zu/sample_%08zu.jpg", i % spec.num_classes, i);
    paths.emplace_back(name);
  }
  return paths;
}

}  // namespace

void fill_content(uint64_t file_id, uint32_t version, uint64_t offset, char* buf, size_t len) {
  char block[kContentBlockBytes];
  while (len > 0) {
    const uint64_t block_offset = offset - offset % kContentBlockBytes;
    const size_t skip = offset - block_offset;
    const size_t n = std::min(len, kContentBlockBytes - skip);
    fill_block(file_id, version, block_offset, block);
    memcpy(buf, block + skip, n);
    buf += n;
    offset += n;
    len -= n;
  }
}

Status write_content_file(const std::string& path, uint64_t file_id, uint32_t version,
                          uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return Status::error(errno, "create " + path);
  }
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(size, 1 << 20)));
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    fill_content(file_id, version, off, buf.data(), n);
    Status s = cachestore::write_all(fd.get(), std::string_view(buf.data(), n), path);
    if (!s.is_ok()) {
      return s;
    }
    off += n;
  }
  return Status::ok();
}

Result<std::vector<std::string>> make_dataset(const std::string& root, const DatasetSpec& spec) {
  std::vector<std::string> paths = dataset_paths(spec);
  const std::string marker = root + "/.epochfs-dataset";
  {
    std::ifstream in(marker);
    std::string existing((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (existing == spec_text(spec)) {
      return paths;
    }
  }
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::error(errno, "mkdir " + root);
  }
  for (size_t c = 0; c < spec.num_classes; ++c) {
    char dir[64];
    snprintf(dir, sizeof(dir), "/class_%04zu", c);
    if (::mkdir((root + dir).c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::error(errno, "mkdir " + root + dir);
    }
  }
  std::mt19937_64 rng(spec.seed);
  // Lognormal with the requested mean: mean = exp(mu + sigma^2 / 2).
  const double mu = std::log(spec.mean_file_bytes) - spec.sigma * spec.sigma / 2;
  std::lognormal_distribution<double> size_dist(mu, spec.sigma);
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto size = static_cast<uint64_t>(std::max(1.0, size_dist(rng)));
    Status s = write_content_file(root + "/" + paths[i], i, 1, size);
    if (!s.is_ok()) {
      return s;
    }
  }
  std::ofstream(marker) << spec_text(spec);
  return paths;
}

Result<uint64_t> file_digest(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return Status::error(errno, "open " + path);
  }
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  // One buffer per thread: a fresh 1 MiB per call is zero-filled and, under ASan, mapped and
  // unmapped each time, which made digesting 10,000 tiny files take minutes.
  thread_local std::vector<char> buf(1 << 20);
  uint64_t off = 0;
  while (true) {
    const ssize_t n = ::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int err = errno;
      XXH64_freeState(state);
      return Status::error(err, "read " + path);
    }
    if (n == 0) {
      break;
    }
    XXH64_update(state, buf.data(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  const uint64_t digest = XXH64_digest(state);
  XXH64_freeState(state);
  return digest;
}

}  // namespace epochfs::tools
