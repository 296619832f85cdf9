// flashattn: the command-line tool. Dispatches to a subcommand and turns its
// exceptions into a message and an exit status.
#include <exception>
#include <iostream>
#include <string_view>

#include "commands.h"

namespace {

using flashattn::cli::Options;

struct Command {
  std::string_view name;
  int (*main)(Options&);
  std::string_view summary;
};

constexpr Command kCommands[] = {
    {"backends", flashattn::cli::backends_main,
     "the backends, their devices, dtypes and limits (the library's table)"},
    {"bench", flashattn::cli::bench_main,
     "time standard attention and every flash backend on a table of shapes"},
    {"check", flashattn::cli::check_main,
     "randomised accuracy sweep of the backends against the float64 reference"},
    {"run", flashattn::cli::run_main, "attention on .npy files: out = softmax(q·kᵀ·scale)·v"},
};

void print_usage(std::ostream& out) {
  out << "usage: flashattn <command> [options]\n\n"
         "Exact attention softmax(Q·Kᵀ·scale)·V, computed FlashAttention-style.\n\ncommands:\n";
  for (const Command& c : kCommands)
    out << "  " << c.name << std::string(10 - c.name.size(), ' ') << c.summary << "\n";
  out << "\n'flashattn <command> --help' describes a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(std::cout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      Options options(argc - 2, argv + 2);
      return c.main(options);
    } catch (const flashattn::cli::UsageError& e) {
      std::cerr << "flashattn " << name << ": " << e.what() << "\n(see 'flashattn " << name
                << " --help')\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "flashattn " << name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "flashattn: unknown command '" << name << "'\n\n";
  print_usage(std::cerr);
  return 2;
}
