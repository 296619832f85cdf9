// K and V copied into rows that start on 64-byte boundaries before the wide
// forward kernels (head dims 257–512) read them, where the caller's rows start
// off L2's 32-byte sectors (head_dim 264: rows of 528 bytes).
#pragma once

#include <optional>

#include "core/params.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda::sm90 {

// p with k and v (each one whose rows start off a sector) pointing to dense
// copies in `scratch`, made on p's stream, rows padded to 64 bytes, where that
// pays (aligned_kv.cu); else p itself.
AttnParams with_aligned_kv(const AttnParams& p, std::optional<Scratch>& scratch);

}  // namespace flashattn::cuda::sm90
