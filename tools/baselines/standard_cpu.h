// Standard attention on the CPU, the baseline `flashattn bench` compares the
// flash backends with: for each (batch, q head) the full seqlen_q × seqlen_k
// score matrix is materialised in fp32, softmaxed row by row, then multiplied
// by V. Plain loops, threaded over query rows.
#pragma once

#include <cstddef>

#include "core/params.h"

namespace flashattn::baselines {

// Runs on host tensors described by validated AttnParams (make_attn_params);
// writes out and, when p.softmax.lse is set, the natural-log lse.
void standard_cpu_forward(const AttnParams& p);

// Bytes of the score matrix standard_cpu_forward allocates for these sizes.
size_t standard_cpu_score_bytes(const Sizes& s);

}  // namespace flashattn::baselines
