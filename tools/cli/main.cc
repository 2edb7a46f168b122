// epochfs: the command line. One add_* function per subcommand defines its options and
// returns what runs it. Exceptions (CLI11's) are caught here and nowhere below.
#include <stdio.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli/cli_docs.h"
#include "tools/cli/commands.h"
#include "tools/cli/mount_helper.h"
#include "tools/cli/size_parse.h"
#include "tools/cli/subcommand.h"
#include "tools/cli/usage.h"

namespace {

using epochfs::tools::Subcommand;
namespace tools = epochfs::tools;

Subcommand add_unmount(CLI::App& app) {
  struct Args {
    std::string path;
    bool lazy = false;
  };

  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("unmount", "Unmount an epochfs mount");
  cmd->add_option("mountpoint", a->path, "The epochfs mount to unmount")->required();
  cmd->add_flag("-l,--lazy", a->lazy, "Detach now; finish when the last file is closed");
  return {cmd, [a] { return tools::cmd_unmount(a->path, a->lazy); }};
}

Subcommand add_stats(CLI::App& app) {
  struct Args {
    std::string path;
    bool json = false;
    bool all = false;
    bool watch = false;
    unsigned count = 0;
    double interval = 1;
  };

  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("stats", "Show a mount's statistics");
  cmd->add_option("mountpoint", a->path, "An epochfs mount")->required();
  cmd->add_flag("--all", a->all, "Every counter, as a table (docs/stats.md says what each is)");
  cmd->add_flag("--json", a->json, "Print the raw JSON document");
  cmd->add_flag("--watch", a->watch, "A live view, refreshed every second");
  cmd->add_option("--count", a->count, "With --watch: stop after this many refreshes");
  cmd->add_option("--interval", a->interval, "With --watch: seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  return {cmd, [a] {
            return a->watch ? tools::cmd_watch(a->path, a->count, a->interval)
                            : tools::cmd_stats(a->path, a->json, a->all);
          }};
}

Subcommand add_verify(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("verify", "Check every cached copy against its hash");
  cmd->add_option("mountpoint", *path, "An epochfs mount")->required();
  return {cmd, [path] { return tools::cmd_verify(*path); }};
}

Subcommand add_doctor(CLI::App& app) {
  struct Args {
    tools::DoctorOptions options;
    std::string size;
    std::string reserve = "5%";
  };

  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "doctor", "Check the node, a source or a mount, and the cache disk; say what to fix");
  cmd->add_option("path", a->options.path, "A mount, or the source you mean to mount");
  cmd->add_option("--cache-dir", a->options.cache_dir,
                  "The cache directory you mean to use (default: the mount's, or "
                  "/var/cache/epochfs)");
  cmd->add_option("--cache-size", a->size, "The --cache-size you mean to use");
  cmd->add_option("--cache-reserve", a->reserve, "The --cache-reserve you mean to use");
  cmd->add_flag("--no-cache", a->options.no_cache, "Skip the cache disk checks");
  cmd->add_option("--fuse-device", a->options.fuse_device, "The FUSE device to check")
      ->default_val(a->options.fuse_device);
  return {cmd, [a] {
            const auto size =
                a->size.empty() ? std::optional<uint64_t>(0) : tools::parse_size(a->size);
            const auto reserve = tools::parse_percent(a->reserve);
            if (!size || !reserve) {
              fprintf(stderr, "epochfs: --cache-size or --cache-reserve: expected 300G, 5%%\n");
              return 1;
            }
            a->options.cache_size_bytes = *size;
            a->options.cache_reserve_percent = *reserve;
            return tools::cmd_doctor(a->options);
          }};
}

Subcommand add_clean(CLI::App& app) {
  auto o = std::make_shared<tools::CleanOptions>();
  auto* cmd = app.add_subcommand(
      "clean", "Remove what dead mounts left in a cache directory (for a Slurm epilog or cron)");
  cmd->add_option("--cache-dir", o->cache_dir, "The cache directory to clean")->required();
  cmd->add_flag("--dry-run", o->dry_run, "List what would be removed; remove nothing");
  return {cmd, [o] { return tools::cmd_clean(*o); }};
}

Subcommand add_publish(CLI::App& app) {
  auto o = std::make_shared<tools::PublishOptions>();
  auto* cmd = app.add_subcommand("publish", "Publish a shuffle order (or a manifest) to a mount");
  cmd->add_option("mountpoint", o->mountpoint, "The epochfs mount to publish to")->required();
  cmd->add_option("file", o->file, "Shuffle file: one path or index per line")->required();
  cmd->add_option("--epoch", o->epoch, "Epoch number (overrides the file's)");
  cmd->add_option("--stream", o->stream, "Stream id, one per rank (overrides the file's)");
  cmd->add_flag("--manifest", o->manifest, "FILE is the manifest that index-form orders refer to");
  cmd->add_flag("--strict", o->strict,
                "Fail (exit 1) when most entries looked up name no file the publisher can read");
  return {cmd, [o] { return tools::cmd_publish(*o); }};
}

// A call from mount(8) or from /etc/fstab (tools/cli/mount_helper.h), turned into the
// `epochfs mount` line it stands for, in args; nullopt to go on with argv as it is, else the
// exit code.
std::optional<int> as_mount_helper(int& argc, char**& argv, const CLI::App& app,
                                   const CLI::App& mount_cmd, std::vector<std::string>& args,
                                   std::vector<char*>& args_argv) {
  if (!tools::is_mount_helper_call(argc, argv, app)) {
    return std::nullopt;
  }
  auto helper = tools::mount_helper_args(argc, argv, mount_cmd);
  if (!helper) {
    return 1;
  }
  args = std::move(helper->args);
  if (helper->verbose || helper->fake) {
    for (const auto& a : args) {
      fprintf(stderr, "%s ", a.c_str());
    }
    fprintf(stderr, "\n");
  }
  if (helper->fake) {
    return 0;
  }
  for (auto& a : args) {
    args_argv.push_back(a.data());
  }
  argc = static_cast<int>(args_argv.size());
  argv = args_argv.data();
  return std::nullopt;
}

int run(int argc, char** argv) {
  CLI::App app{"epochfs: a read-only FUSE overlay that stages training data on local disk"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("epochfs ") + EPOCHFS_VERSION);
  const std::vector<Subcommand> commands = {tools::add_mount_command(app),
                                            add_unmount(app),
                                            add_stats(app),
                                            add_verify(app),
                                            add_doctor(app),
                                            add_clean(app),
                                            add_publish(app)};

  // The man page and the completion script, from the definitions above (tools/cli/cli_docs.h).
  if (argc == 2 && std::string_view(argv[1]) == "--man") {
    fputs(tools::man_page(app).c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::string_view(argv[1]) == "--bash-completion") {
    fputs(tools::bash_completion(app).c_str(), stdout);
    return 0;
  }
  if (auto unknown = tools::unknown_subcommand(argc, argv, app)) {
    fprintf(stderr, "epochfs: unknown command '%s'%s; see epochfs --help\n", argv[1],
            unknown->empty() ? "" : (" (did you mean '" + *unknown + "'?)").c_str());
    return 2;
  }
  std::vector<std::string> helper_args;
  std::vector<char*> helper_argv;
  if (auto code = as_mount_helper(argc, argv, app, *commands[0].app, helper_args, helper_argv)) {
    return *code;
  }
  // mount(8) takes a helper's 1 for a bad invocation (its 2 means a system error).
  const bool helper = !helper_argv.empty();
  const auto helper_code = [helper](int code) {
    return helper && code == tools::kUsageError ? 1 : code;
  };
  if (auto code = tools::parse_command_line(app, argc, argv)) {
    return helper_code(*code);
  }
  return helper_code(tools::run_parsed(commands));
}

}  // namespace

int main(int argc, char** argv) { return epochfs::tools::run_main("epochfs", run, argc, argv); }
