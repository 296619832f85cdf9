// The CPU backends. Both take validated AttnParams on host memory.
#pragma once

#include <vector>

#include "core/params.h"

namespace flashattn::cpu {

// A KV cache's new keys and values written into it (AttnParams::new_keys),
// before a backend attends.
void append_to_cache(const AttnParams& p);

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

// The gradients in float64 from q, k, v and dout alone: the reference computes
// its own softmax and output (it ignores out, lse and row_dot), so it is the
// exact gradient of the forward it defines. The oracle of every backward.
void reference_backward(const BwdParams& p);

// The tiled backward in fp32 from the forward's out and lse: D, then dk and dv
// over key tiles, then dq over query tiles (each recomputing P); extra memory
// O(seqlen_q) for D and O(tile) per thread.
void flash_backward(const BwdParams& p);

}  // namespace flashattn::cpu
