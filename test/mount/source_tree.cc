#include "test/mount/source_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <catch2/catch.hpp>

#include "tools/lab/dataset.h"

namespace epochfs::test {

namespace fs = std::filesystem;

namespace {

void add_file(const std::string& root, SourceTree& tree, const std::string& rel, uint64_t size) {
  const uint64_t id = tree.files.size() + 1;
  REQUIRE(tools::write_content_file(root + "/" + rel, id, 1, size).is_ok());
  tree.files[rel] = size;
}

void add_boundary_files(const std::string& root, SourceTree& tree) {
  add_file(root, tree, "empty", 0);
  add_file(root, tree, "one", 1);
  // Page size, the kernel's default read-ahead window, and FUSE's 1 MiB maximum request.
  for (uint64_t edge : {4096ull, 128ull << 10, 1ull << 20}) {
    for (int delta : {-1, 0, 1}) {
      add_file(root, tree, "edge_" + std::to_string(edge + delta), edge + delta);
    }
  }
}

void add_many_files(const std::string& root, SourceTree& tree, size_t count) {
  for (size_t d = 0; d < 10; ++d) {
    fs::create_directories(root + "/many/d" + std::to_string(d));
  }
  for (size_t i = 0; i < count; ++i) {
    // 0 .. ~12 KB: small files, spread over page boundaries.
    add_file(root, tree, "many/d" + std::to_string(i % 10) + "/f" + std::to_string(i),
             (i * 997) % 12289);
  }
}

void add_special_entries(const std::string& root, SourceTree& tree) {
  fs::create_directories(root + "/nested/a/b/c");
  add_file(root, tree, "nested/a/b/c/deep.bin", 5000);
  add_file(root, tree, "name with spaces.txt", 100);
  add_file(root, tree, "ünïcødé 日本語.txt", 200);
  fs::create_symlink("one", root + "/link_inside");
  fs::create_symlink("nested/a", root + "/link_dir");
  fs::create_symlink("../outside_secret", root + "/link_dotdot");
  fs::create_symlink(fs::path(root).parent_path() / "outside_secret", root + "/link_absolute");
  fs::create_symlink("dangling_target", root + "/link_dangling");
  REQUIRE(mkfifo((root + "/fifo").c_str(), 0644) == 0);
  add_file(root, tree, "unreadable", 300);
  chmod((root + "/unreadable").c_str(), 0);
  tree.unreadable.push_back("unreadable");
  fs::create_directories(root + "/closed_dir");
  add_file(root, tree, "closed_dir/inside", 10);
  chmod((root + "/closed_dir").c_str(), 0700);
}

}  // namespace

SourceTree make_source_tree(const std::string& root, const SourceTreeOptions& options) {
  fs::create_directories(root);
  chmod(root.c_str(), 0755);
  REQUIRE(tools::write_content_file(fs::path(root).parent_path() / "outside_secret", 999, 1, 64)
              .is_ok());
  SourceTree tree;
  add_boundary_files(root, tree);
  add_special_entries(root, tree);
  add_many_files(root, tree, options.many_files);
  if (options.big_file_bytes > 0) {
    add_file(root, tree, "big.bin", options.big_file_bytes);
  }
  return tree;
}

std::vector<std::string> list_tree(const std::string& root) {
  std::vector<std::string> out = {""};
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    out.push_back(fs::relative(it->path(), root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace epochfs::test
