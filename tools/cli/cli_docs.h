// The CLI's own text in two more forms: a man page (troff, section 1) and a bash completion
// script, both made from the same CLI11 definitions as `--help`, so neither can drift from
// the options the binary takes. The build writes them next to the binary (`epochfs --man`,
// `epochfs --bash-completion`) and `cmake --install` puts them in place.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace epochfs::tools {

std::string man_page(const CLI::App& app);

std::string bash_completion(const CLI::App& app);

}  // namespace epochfs::tools
