#pragma once

// A fresh directory for one test, removed with whatever is left in it: the unit tests' one
// way to get a place on disk (the mount tests' TempDir also detaches mounts left inside).
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace epochfs::test {

class ScratchDir {
 public:
  // The directory's name starts with "epochfs-<tag>-", so a leftover says which test made it.
  explicit ScratchDir(std::string_view tag) {
    std::string name =
        (std::filesystem::temp_directory_path() / ("epochfs-" + std::string(tag) + "-XXXXXX"))
            .string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + name);
    }
    path_ = name;
  }

  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace epochfs::test
