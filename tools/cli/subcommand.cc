#include "tools/cli/subcommand.h"

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

}  // namespace epochfs::tools
