// terse-bench: one executable, one subcommand per benchmark (codecs, p2p, allreduce, ...).
#include "subcommand.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace terse::bench {
std::vector<Subcommand>& subcommands() {
  static std::vector<Subcommand> all;
  return all;
}
}  // namespace terse::bench

static void usage(FILE* out) {
  auto all = terse::bench::subcommands();
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::fprintf(out,
               "usage: terse-bench <subcommand> [options]   (terse-bench <subcommand> --help)\n\n");
  for (const auto& s : all) std::fprintf(out, "  %-14s %s\n", s.name.c_str(), s.summary.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& s : terse::bench::subcommands())
    if (s.name == argv[1]) return s.main(argc - 1, argv + 1);
  std::fprintf(stderr, "terse-bench: unknown subcommand '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
