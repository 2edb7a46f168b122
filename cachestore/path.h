// Relative paths inside a root directory: validation and joining.
//
// epochfs names every file by its path relative to the source root ("" is the root itself).
// These helpers are pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace epochfs::cachestore {

// True for one path component the kernel may hand us: not empty, not "." or "..", no '/' or
// NUL, at most NAME_MAX bytes.
bool is_valid_name(std::string_view name);

// True for a relative path made of valid names joined by single '/', or "" for the root.
bool is_valid_relative_path(std::string_view path);

// "" + "a" = "a"; "a" + "b" = "a/b". REQUIRES: is_valid_name(name).
std::string join_path(std::string_view parent, std::string_view name);

}  // namespace epochfs::cachestore
