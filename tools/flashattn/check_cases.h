// The cases `flashattn check` sweeps: first a fixed list of awkward shapes
// (seqlen 1, 17, 1000; head_dim 1, 3, 80, 200; seqlen_q ≠ seqlen_k; GQA;
// strided views; both causal alignments; on the GPU also head_dim 1024 and
// seqlen 4097), then random ones, all drawn from the seed so a run replays.
#pragma once

#include <cstdint>
#include <vector>

#include "problem.h"

namespace flashattn::cli {

struct CheckCase {
  harness::Case spec;
  uint64_t seed;  // the inputs' seed
};

// quick: only small cases (seconds under compute-sanitizer).
int default_check_cases(bool quick);
std::vector<CheckCase> check_cases(DeviceKind device, int count, uint64_t seed, bool quick);

}  // namespace flashattn::cli
