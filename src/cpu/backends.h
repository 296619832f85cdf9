// The CPU backends. Both take validated AttnParams on host memory.
#pragma once

#include <vector>

#include "core/params.h"

namespace flashattn::cpu {

// Standard attention in float64 with each score row materialised: the oracle.
void reference_forward(const AttnParams& p);

// Float64 outputs of the reference for the given query rows only, laid out
// (batch, rows.size(), heads_q, head_dim); lse (batch, heads_q, rows.size()) if
// lse is non-null. Lets tests and benchmarks check huge shapes on a sample of rows.
std::vector<double> reference_rows(const AttnParams& p, const std::vector<int>& rows,
                                   std::vector<double>* lse = nullptr);

// Tiled online-softmax attention, fp32 arithmetic, threads over
// (batch, head, query tile); extra memory O(tile) per thread.
void flash_forward(const AttnParams& p);

}  // namespace flashattn::cpu
