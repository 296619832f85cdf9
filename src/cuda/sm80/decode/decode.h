// cuda_mma's decode kernel (decode_kernel.cuh): few query rows against many
// keys, with split-KV and a GQA group's query heads in one tile.
#pragma once

#include "core/params.h"
#include "cuda/backends.h"

namespace flashattn::cuda::decode {

inline constexpr int kMaxHeadDim = kMmaDecodeMaxHeadDim;

// Whether p runs on the decode kernel: a KV cache, 16-bit, one head_dim up to
// kMaxHeadDim for q, k and v, and either paged, unchecked (only this kernel checks on the
// device) or few rows per kv head (the GQA group times seqlen_q, at most 64).
bool takes(const AttnParams& p);

// Whether forward(p) writes p's new keys and values into the cache itself
// (rows 16-byte aligned), so that append_to_cache must not run before it.
bool appends_new_keys(const AttnParams& p);

void forward(const AttnParams& p);

}  // namespace flashattn::cuda::decode
