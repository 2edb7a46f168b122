// Usage errors in the project's words. CLI11's own messages told the parser's view ("Check bogus
// value in {auto->0,classic->1,...} FAILED", "The following arguments were not expected: 1G
// --cache-sise") and exited 105 to 109; here every usage error is one line naming the command,
// what is wrong and where its help is, with "did you mean" for a mistyped option, and exit
// code 2 (1 stays for failures).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace epochfs::tools {

// The exit code of a usage error (a failure is 1). mount(8)'s helpers use 1 for both.
constexpr int kUsageError = 2;

// The candidate nearest to word, if within max_distance edits (a near miss); else nullopt.
std::optional<std::string> nearest(const std::string& word,
                                   const std::vector<std::string>& candidates,
                                   size_t max_distance = 2);

// A check that the value is one of names (any case): "'x' is not one of a, b, c" otherwise.
CLI::Validator one_of(std::vector<std::string> names);

// Parses argv with app: nullopt if it is good; otherwise the exit code, the help or the
// version printed (0), or the usage error explained on stderr (2).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace epochfs::tools
