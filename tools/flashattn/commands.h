// The subcommands of the flashattn tool. Each reads its options, prints its
// --help, and returns the process exit status; a bad command line throws
// UsageError (exit 2), a failure any other exception (exit 1).
#pragma once

#include <string>

#include "args.h"

namespace flashattn::cli {

int backends_main(Options& options);
int bench_main(Options& options);
int check_main(Options& options);
int run_main(Options& options);

// The registry's backends as a Markdown table (`flashattn backends --markdown`),
// and their names for usage texts ("auto, reference, cpu, ...").
std::string backend_table_markdown();
std::string backend_names();

}  // namespace flashattn::cli
