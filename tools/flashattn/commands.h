// The subcommands of the flashattn tool. Each reads its options, prints its
// --help, and returns the process exit status; a bad command line throws
// UsageError (exit 2), a failure any other exception (exit 1).
#pragma once

#include "args.h"

namespace flashattn::cli {

int bench_main(Options& options);
int check_main(Options& options);
int run_main(Options& options);

}  // namespace flashattn::cli
