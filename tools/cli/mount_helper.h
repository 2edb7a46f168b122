// Mounting from /etc/fstab: the argument conventions of mount(8) helpers, turned into an
// `epochfs mount` command line.
//
// Two ways in, both ending up in mount_helper_args():
// - mount(8) runs /sbin/mount.fuse.epochfs (a link to epochfs) as
//   `mount.fuse.epochfs SOURCE MOUNTPOINT [-sfnv] [-o OPTS] [-t TYPE]`;
// - without that link, mount(8) runs fuse3's /sbin/mount.fuse3, which runs
//   `epochfs SOURCE MOUNTPOINT -o OPTS` from PATH.
// Each option in OPTS that names an `epochfs mount` option (cache_dir=/nvme/x, immutable,
// lookahead=2G; '_' or '-') becomes that option; mount(8)'s own (defaults, _netdev, nofail,
// noauto, user, x-systemd.*, ...) are dropped; the rest go to libfuse with -o.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace epochfs::tools {

// When argv's first argument is a mistyped subcommand (not an option, not a subcommand, and not
// the source path of a mount helper call): the nearest subcommand's name, or "" if none is
// near. nullopt otherwise.
std::optional<std::string> unknown_subcommand(int argc, char** argv, const CLI::App& app);

// True when argv is a helper call: the program is named mount.<something>, or its first
// argument is neither an option nor a subcommand of app.
bool is_mount_helper_call(int argc, char** argv, const CLI::App& app);

struct HelperArgs {
  std::vector<std::string> args;  // `epochfs mount ...`, program name first
  bool fake = false;              // -f: do everything but the mount
  bool verbose = false;           // -v: print the command line
};

// The `epochfs mount` command line for a helper call; nullopt (after printing why) when the
// call is malformed. mount_cmd is the `mount` subcommand, to tell its options from libfuse's.
std::optional<HelperArgs> mount_helper_args(int argc, char** argv, const CLI::App& mount_cmd);

}  // namespace epochfs::tools
