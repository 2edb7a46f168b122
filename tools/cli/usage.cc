#include "tools/cli/usage.h"

#include <stdio.h>
#include <strings.h>

#include <algorithm>
#include <sstream>

namespace epochfs::tools {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The deepest subcommand the command line chose: "epochfs mount", or "epochfs".
const CLI::App& chosen(const CLI::App& app) {
  const CLI::App* at = &app;
  for (auto subs = at->get_subcommands(); !subs.empty(); subs = at->get_subcommands()) {
    at = subs.front();
  }
  return *at;
}

// argv[0] may be a path, or mount(8)'s helper name: the command is epochfs's.
std::string command_of(const CLI::App& root, const CLI::App& cmd) {
  return &cmd == &root ? "epochfs" : "epochfs " + cmd.get_name();
}

std::vector<std::string> long_options(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) {
      names.push_back("--" + l);
    }
  }
  return names;
}

// "unknown option '--cache-sise' (did you mean '--cache-size'?)" for arguments left over.
std::string explain_extras(const CLI::App& cmd, const CLI::ExtrasError& e) {
  std::string what = e.what();
  const size_t colon = what.find(": ");
  std::istringstream extras(colon == std::string::npos ? "" : what.substr(colon + 2));
  std::vector<std::string> words;
  for (std::string w; extras >> w;) {
    words.push_back(w);
  }
  auto option = std::find_if(words.begin(), words.end(),
                             [](const std::string& w) { return w.size() > 1 && w[0] == '-'; });
  if (option == words.end()) {
    return "unexpected argument '" + (words.empty() ? what : words.front()) + "'";
  }
  const std::string name = option->substr(0, option->find('='));
  const auto near = nearest(name, long_options(cmd));
  return "unknown option '" + name + "'" + (near ? " (did you mean '" + *near + "'?)" : "");
}

}  // namespace

std::optional<std::string> nearest(const std::string& word,
                                   const std::vector<std::string>& candidates,
                                   size_t max_distance) {
  std::optional<std::string> best;
  size_t best_distance = max_distance + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (const std::string& n : names) {
    list += (list.empty() ? "" : ", ") + n;
  }
  return CLI::Validator(
      [names, list](std::string& value) -> std::string {
        for (const std::string& n : names) {
          if (strcasecmp(n.c_str(), value.c_str()) == 0) {
            return "";
          }
        }
        return "'" + value + "' is not one of " + list;
      },
      "");
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    const CLI::App& cmd = chosen(app);
    const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e);
    const std::string what = extras ? explain_extras(cmd, *extras) : e.what();
    const std::string command = command_of(app, cmd);
    fprintf(stderr, "%s: %s; see %s --help\n", command.c_str(), what.c_str(), command.c_str());
    return kUsageError;
  }
}

}  // namespace epochfs::tools
