#include "tools/cli/cli_docs.h"

#include <sstream>
#include <vector>

namespace epochfs::tools {
namespace {

// Text safe for troff: backslashes and hyphens escaped, no line starting with a control
// character.
std::string troff(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) {
    out = "\\&" + out;
  }
  return out;
}

std::vector<const CLI::App*> commands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// The options a user types: named ones, without --help.
std::vector<const CLI::Option*> named_options(const CLI::App& cmd) {
  return cmd.get_options([](const CLI::Option* o) {
    return o->nonpositional() && o->get_name() != "--help" && !o->get_name().empty();
  });
}

std::vector<const CLI::Option*> positionals(const CLI::App& cmd) {
  return cmd.get_options([](const CLI::Option* o) { return !o->nonpositional(); });
}

std::string upper(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return s;
}

// "epochfs: what it is" without the name the NAME section starts with.
std::string without_name(const std::string& description) {
  const std::string prefix = "epochfs: ";
  return description.rfind(prefix, 0) == 0 ? description.substr(prefix.size()) : description;
}

// What an option takes, in one word: CLI11's type name up to its checks ("UINT:INT in [1 -
// 1024]" is UINT); empty for a flag.
std::string value_name(const CLI::Option& o) {
  if (o.get_expected_max() == 0) {
    return "";
  }
  const std::string type = o.get_type_name();
  return type.substr(0, type.find_first_of(": "));
}

void man_command(std::ostringstream& out, const CLI::App& cmd) {
  out << ".SS \"epochfs " << troff(cmd.get_name());
  for (const CLI::Option* p : positionals(cmd)) {
    out << " " << troff(upper(p->get_name(true)));
  }
  out << " [OPTIONS]\"\n" << troff(cmd.get_description()) << "\n";
  for (const CLI::Option* p : positionals(cmd)) {
    out << ".TP\n.I " << troff(upper(p->get_name(true))) << "\n"
        << troff(p->get_description().empty() ? "(required)" : p->get_description()) << "\n";
  }
  for (const CLI::Option* o : named_options(cmd)) {
    std::string names = o->get_name(false, true);
    for (size_t at = names.find(','); at != std::string::npos; at = names.find(',', at + 2)) {
      names.insert(at + 1, " ");
    }
    const std::string type = value_name(*o);
    if (type.empty()) {
      out << ".TP\n.B " << troff(names);
    } else {
      out << ".TP\n.BI \"" << troff(names) << " \" " << troff(type);
    }
    out << "\n" << troff(o->get_description());
    if (!o->get_default_str().empty()) {
      out << " (default: " << troff(o->get_default_str()) << ")";
    }
    out << "\n";
  }
}

}  // namespace

std::string man_page(const CLI::App& app) {
  std::ostringstream out;
  out << ".TH EPOCHFS 1 \"\" \"epochfs " EPOCHFS_VERSION "\" \"User Commands\"\n"
      << ".SH NAME\nepochfs \\- " << troff(without_name(app.get_description())) << "\n"
      << ".SH SYNOPSIS\n.B epochfs\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]\n"
      << ".br\n.B mount \\-t fuse.epochfs\n\\fISOURCE MOUNTPOINT\\fR \\-o \\fIOPTIONS\\fR\n"
      << ".SH DESCRIPTION\nThe commands below, each with its options (\\fBepochfs "
      << "\\fICOMMAND\\fB \\-\\-help\\fR shows the same). As a mount(8) helper, "
      << "\\fImount \\-t fuse.epochfs\\fR takes the options of \\fBepochfs mount\\fR by their "
      << "long names (cache_dir=/nvme/epochfs).\n"
      << ".SH COMMANDS\n";
  for (const CLI::App* cmd : commands(app)) {
    man_command(out, *cmd);
  }
  out << ".SH EXIT STATUS\n0 on success, 1 on a failure, 2 on a usage error.\n"
      << ".SH EXAMPLES\n"
      << "Mount shared storage with the cache on local NVMe, then publish an epoch's order "
         "(one path per line, relative to the mount):\n"
      << ".PP\n.nf\n.RS\n"
      << "epochfs mount /nfs/datasets /mnt/data \\-\\-cache\\-dir /nvme/epochfs\n"
      << "epochfs publish /mnt/data epoch0.txt \\-\\-epoch 0 \\-\\-strict\n"
      << "epochfs stats /mnt/data\n"
      << "epochfs unmount /mnt/data\n"
      << ".RE\n.fi\n.PP\n"
      << "Check a node, or one mount:\n.PP\n.nf\n.RS\nepochfs doctor /mnt/data\n.RE\n.fi\n"
      << ".SH FILES\n.TP\n.I MOUNTPOINT/.epochfs/\nThe control directory: stats, metrics, "
      << "orders published by training jobs.\n"
      << ".TP\n.I /usr/share/doc/epochfs/\nThe user guide, the semantics, the stats and the "
      << "deployment examples (fstab, systemd, Slurm, Kubernetes).\n"
      << ".TP\n.I /usr/share/epochfs/python/\nThe Python package as a wheel, for any Python.\n"
      << ".SH SEE ALSO\nfusermount3(1), mount(8).\n";
  return out.str();
}

std::string bash_completion(const CLI::App& app) {
  std::ostringstream out;
  out << "# bash completion for epochfs, made by `epochfs --bash-completion`\n"
      << "_epochfs() {\n"
      << "  local cur=${COMP_WORDS[COMP_CWORD]} opts\n"
      << "  if ((COMP_CWORD == 1)); then\n"
      << "    COMPREPLY=($(compgen -W \"--help --version";
  for (const CLI::App* cmd : commands(app)) {
    out << " " << cmd->get_name();
  }
  out << "\" -- \"$cur\"))\n"
      << "    return\n"
      << "  fi\n"
      << "  case ${COMP_WORDS[1]} in\n";
  for (const CLI::App* cmd : commands(app)) {
    out << "    " << cmd->get_name() << ") opts=\"--help";
    for (const CLI::Option* o : named_options(*cmd)) {
      for (const std::string& name : o->get_lnames()) {
        out << " --" << name;
      }
    }
    out << "\" ;;\n";
  }
  out << "    *) opts=\"\" ;;\n"
      << "  esac\n"
      << "  if [[ $cur == -* ]]; then\n"
      << "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
      << "  else\n"
      << "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      << "  fi\n"
      << "}\n"
      << "complete -o filenames -F _epochfs epochfs\n";
  return out.str();
}

}  // namespace epochfs::tools
