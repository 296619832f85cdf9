// Measuring one shape for `flashattn bench`: standard attention and the flash
// backends run on the same harness::Problem, each timed (median of repeated
// runs after a warm-up), its peak extra memory taken and its output scored
// against the float64 reference.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "problem.h"

namespace flashattn::cli {

// The name `bench` gives standard attention next to the backend names.
inline constexpr const char* kStandard = "standard";

struct BenchRow {
  std::string impl;  // kStandard or a backend name
  harness::Case shape;
  std::string note;  // why nothing was measured ("skipped: ..."); empty when measured
  double ms = 0, tflops = 0;
  size_t peak_extra_bytes = 0;
  double max_abs = 0, rel_l2 = 0;
  std::optional<double> speedup;  // standard's ms / this ms, when standard was measured
  bool measured() const { return note.empty(); }
};

struct BenchConfig {
  Device device;
  int max_reps = 30;
  uint64_t seed = 1;
};

// Runs each of impls (kStandard first if present) on one problem of this shape;
// on_row sees each row as soon as it is done. Progress goes to stderr, each
// message starting with progress_prefix.
std::vector<BenchRow> bench_shape(const harness::Case& shape, const std::vector<std::string>& impls,
                                  const BenchConfig& config, const std::string& progress_prefix,
                                  const std::function<void(const BenchRow&)>& on_row);

// One progress line on stderr, overwritten in place on a terminal.
void progress(const std::string& message);
void clear_progress();

}  // namespace flashattn::cli
