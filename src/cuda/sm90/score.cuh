// The score step of the Hopper forward: the variant (core/variant.h), then the
// mask (core/mask.h), on a warpgroup's scores in wgmma's accumulator layout
// (softmax.cuh, FragmentCoord). Only key blocks that need the mask
// (KeyBlocks::needs_mask) call it.
#pragma once

#include <cmath>

#include "core/mask.h"
#include "core/variant.h"
#include "cuda/sm90/softmax.cuh"

namespace flashattn::cuda::sm90 {

// kLowerEnd: whether a row's key range may begin inside the block
// (KeyBlocks::lower_end_in; score_step below picks).
template <bool kLowerEnd, class Tr, typename Variant>
__device__ __forceinline__ void mask_scores(float (&s)[Tr::kBlockN / 2], const RowMask& mask,
                                            const FragmentCoord& at, int row_base, int n_block,
                                            Variant variant) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = int64_t(row_base) + at.row0 + 8 * half;
    const int key_end = mask.key_end(row);
    const int key_begin = kLowerEnd ? mask.key_begin(row) : 0;
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = n_block * Tr::kBlockN + 8 * j + at.col0 + e;
        float& x = s[4 * j + 2 * half + e];
        if constexpr (!Variant::kIdentity) x = variant(x, row, key);
        if (key >= key_end || (kLowerEnd && key < key_begin)) x = -INFINITY;
      }
  }
}

// The score step of key block n_block for a warpgroup whose key blocks are `blocks`.
template <class Tr, typename Variant = IdentityScore>
__device__ __forceinline__ void score_step(float (&s)[Tr::kBlockN / 2], const RowMask& mask,
                                           const KeyBlocks& blocks, const FragmentCoord& at,
                                           int row_base, int n_block, Variant variant = {}) {
  if constexpr (KeyBlocks::kLowerEnds) {
    if (blocks.lower_end_in(n_block))
      return mask_scores<true, Tr>(s, mask, at, row_base, n_block, variant);
  }
  mask_scores<false, Tr>(s, mask, at, row_base, n_block, variant);
}

}  // namespace flashattn::cuda::sm90
