// terse-bench subcommands register themselves here, so adding one is adding one source file.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace terse::bench {

struct Subcommand {
  std::string name;                                // "codecs", "p2p", "allreduce", ...
  std::string summary;                             // one line for `terse-bench --help`
  std::function<int(int argc, char** argv)> main;  // argv[0] is the subcommand's name
};

std::vector<Subcommand>& subcommands();

struct RegisterSubcommand {
  explicit RegisterSubcommand(Subcommand s) { subcommands().push_back(std::move(s)); }
};

}  // namespace terse::bench
