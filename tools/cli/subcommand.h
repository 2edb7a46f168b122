// A subcommand of a CLI11 app and what runs when the command line named it. Each add_*
// function defines one subcommand's options and returns its handler, which reads the parsed
// values; main() runs the handler of the subcommand that was parsed.
#pragma once

#include <functional>
#include <vector>

namespace CLI {
class App;
}

namespace epochfs::tools {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code
};

// Runs the parsed one of commands; 2 if none was parsed (CLI11 requires one first).
int run_parsed(const std::vector<Subcommand>& commands);

// main() of a program: run(argc, argv), with an exception (CLI11's) reported as
// "<program>: <what>" and exit code 1. Nothing below main catches them.
int run_main(const char* program, int (*run)(int, char**), int argc, char** argv);

// `epochfs mount`: its options and the checks of the values CLI11 cannot check itself
// (tools/cli/mount_args.cc).
Subcommand add_mount_command(CLI::App& app);

}  // namespace epochfs::tools
