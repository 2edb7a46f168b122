#include "tools/cli/mount_helper.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli/usage.h"

namespace epochfs::tools {
namespace {

// mount(8)'s own options and systemd's, which mean nothing to a FUSE filesystem. "ro" and "rw"
// too: epochfs is read-only and keeps the kernel's flag off so orders can be written into
// <mount>/.epochfs.
bool is_mount_only_option(const std::string& opt) {
  static const std::set<std::string> kNames = {
      "defaults", "auto",  "noauto", "_netdev", "nofail", "user", "users", "nouser",
      "owner",    "group", "ro",     "rw",      "sw",     "bg",   "fg",    "loud"};
  return kNames.count(opt) > 0 || opt.rfind("x-", 0) == 0 || opt.rfind("comment=", 0) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(sep, start), s.size());
    if (end > start) {
      parts.push_back(s.substr(start, end - start));
    }
    start = end + 1;
  }
  return parts;
}

// Appends the translation of one -o option to out.
void translate_option(const std::string& opt, const CLI::App& mount_cmd,
                      std::vector<std::string>* out) {
  if (is_mount_only_option(opt)) {
    return;
  }
  const size_t eq = opt.find('=');
  std::string name = opt.substr(0, eq);
  std::replace(name.begin(), name.end(), '_', '-');
  const CLI::Option* known = mount_cmd.get_option_no_throw("--" + name);
  if (known == nullptr || name == "o") {
    out->push_back("-o");
    out->push_back(opt);
    return;
  }
  out->push_back("--" + name);
  if (eq != std::string::npos) {
    out->push_back(opt.substr(eq + 1));
  }
}

}  // namespace

namespace {

bool is_subcommand(const CLI::App& app, const char* name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(name)) {
      return true;
    }
  }
  return false;
}

// A source in a mount(8) call is a path (mount.fuse3 passes fstab's first field as is).
bool looks_like_source(const char* arg) {
  struct stat st;
  return strchr(arg, '/') != nullptr || ::stat(arg, &st) == 0;
}

}  // namespace

std::optional<std::string> unknown_subcommand(int argc, char** argv, const CLI::App& app) {
  const char* slash = strrchr(argv[0], '/');
  if (argc < 2 || argv[1][0] == '-' || strncmp(slash ? slash + 1 : argv[0], "mount.", 6) == 0 ||
      is_subcommand(app, argv[1]) || (argc >= 3 && looks_like_source(argv[1]))) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return nearest(argv[1], names).value_or("");
}

bool is_mount_helper_call(int argc, char** argv, const CLI::App& app) {
  const char* slash = strrchr(argv[0], '/');
  const std::string program = slash != nullptr ? slash + 1 : argv[0];
  if (program.rfind("mount.", 0) == 0) {
    return true;
  }
  if (argc < 3 || argv[1][0] == '-') {
    return false;
  }
  return !is_subcommand(app, argv[1]);
}

std::optional<HelperArgs> mount_helper_args(int argc, char** argv, const CLI::App& mount_cmd) {
  HelperArgs h;
  std::vector<std::string> positional;
  std::vector<std::string> options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" || a == "-t" || a == "-N") {
      if (i + 1 >= argc) {
        fprintf(stderr, "epochfs: %s needs a value\n", a.c_str());
        return std::nullopt;
      }
      const std::string value = argv[++i];
      if (a == "-o") {
        for (const auto& opt : split(value, ',')) {
          translate_option(opt, mount_cmd, &options);
        }
      } else if (a == "-N") {
        fprintf(stderr, "epochfs: mounting in another namespace (-N) is not supported\n");
        return std::nullopt;
      }
    } else if (a.size() > 1 && a[0] == '-' && a.find_first_not_of("sfnv", 1) == std::string::npos) {
      h.fake = h.fake || a.find('f') != std::string::npos;
      h.verbose = h.verbose || a.find('v') != std::string::npos;
    } else if (a[0] == '-') {
      fprintf(stderr, "epochfs: unknown mount helper option %s\n", a.c_str());
      return std::nullopt;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    fprintf(stderr, "epochfs: usage as a mount helper: SOURCE MOUNTPOINT [-o OPTIONS]\n");
    return std::nullopt;
  }
  h.args = {"epochfs", "mount", positional[0], positional[1]};
  h.args.insert(h.args.end(), options.begin(), options.end());
  return h;
}

}  // namespace epochfs::tools
