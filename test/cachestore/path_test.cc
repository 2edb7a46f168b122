#include "cachestore/path.h"

#include <string>

#include <catch2/catch.hpp>

namespace epochfs::cachestore {

TEST_CASE("is_valid_name accepts one component and rejects the rest", "[path]") {
  CHECK(is_valid_name("a"));
  CHECK(is_valid_name("name with spaces"));
  CHECK(is_valid_name("ünïcødé.jpg"));
  CHECK(is_valid_name("..."));  // three dots is an ordinary name
  CHECK_FALSE(is_valid_name(""));
  CHECK_FALSE(is_valid_name("."));
  CHECK_FALSE(is_valid_name(".."));
  CHECK_FALSE(is_valid_name("a/b"));
  CHECK_FALSE(is_valid_name(std::string("a\0b", 3)));
  CHECK(is_valid_name(std::string(255, 'x')));
  CHECK_FALSE(is_valid_name(std::string(256, 'x')));
}

TEST_CASE("is_valid_relative_path rejects escapes and absolute paths", "[path]") {
  CHECK(is_valid_relative_path(""));
  CHECK(is_valid_relative_path("a/b/c.jpg"));
  CHECK_FALSE(is_valid_relative_path("/etc/passwd"));
  CHECK_FALSE(is_valid_relative_path("../x"));
  CHECK_FALSE(is_valid_relative_path("a/../../x"));
  CHECK_FALSE(is_valid_relative_path("a//b"));
  CHECK_FALSE(is_valid_relative_path("a/"));
  CHECK_FALSE(is_valid_relative_path("./a"));
}

TEST_CASE("join_path joins onto the root and onto directories", "[path]") {
  CHECK(join_path("", "a") == "a");
  CHECK(join_path("a", "b") == "a/b");
  CHECK(join_path("a/b", "c d") == "a/b/c d");
}

}  // namespace epochfs::cachestore
