#include "tools/cli/subcommand.h"

#include <stdio.h>

#include <exception>

#include <CLI/CLI.hpp>

namespace epochfs::tools {

int run_parsed(const std::vector<Subcommand>& commands) {
  for (const auto& c : commands) {
    if (c.app->parsed()) {
      return c.run();
    }
  }
  return 2;
}

int run_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace epochfs::tools
