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
// (KeyBlocks::lower_end_in; score_step below picks). bias: the bias's reader for
// its element type (Score::kBias), else NoBiasReader; masked keys' elements
// (those past seqlen_k among them) are not read.
template <bool kLowerEnd, class Tr, typename Score, typename Bias>
__device__ __forceinline__ void mask_scores(float (&s)[Tr::kBlockN / 2], const RowMask& mask,
                                            const FragmentCoord& at, int row_base, int n_block,
                                            const Score& score, const Bias& bias) {
  // The thread's keys are key0 + 8j + e; each row's range is taken relative to
  // key0, so that the test per element compares with a constant (no key
  // arithmetic per element: 32 instructions of a 128-key block).
  const int key0 = n_block * Tr::kBlockN + at.col0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row_base + at.row0 + 8 * half;
    const int end = mask.key_end_small(row) - key0;
    const int begin = kLowerEnd ? mask.key_begin_small(row) - key0 : 0;
    // ALiBi's distance of this thread's first key, stepped by constants across the row.
    float distance0 = 0.0f;
    if constexpr (!Score::kIdentity) distance0 = score.distance(row, key0);
    const auto* bias_row = bias.row_at(row);
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = 8 * j + e;  // past key0
        float& x = s[4 * j + 2 * half + e];
        const bool masked = key >= end || (kLowerEnd && key < begin);
        if constexpr (!Score::kIdentity) x = score.at(x, distance0 - float(8 * j + e));
        if constexpr (Score::kBias) {
          if (!masked) x += bias.at(bias_row, key0 + key);
        }
        if (masked) x = -INFINITY;
      }
  }
}

template <bool kLowerEnd, class Tr, typename Score>
__device__ __forceinline__ void mask_scores(float (&s)[Tr::kBlockN / 2], const RowMask& mask,
                                            const FragmentCoord& at, int row_base, int n_block,
                                            const Score& score) {
  if constexpr (Score::kBias)
    score.bias.read([&](const auto& bias) {
      mask_scores<kLowerEnd, Tr>(s, mask, at, row_base, n_block, score, bias);
    });
  else
    mask_scores<kLowerEnd, Tr>(s, mask, at, row_base, n_block, score, NoBiasReader{});
}

// The score step of key block n_block for a warpgroup whose key blocks are
// `blocks`, in a kernel instantiated with Variant (core/variant.h).
template <class Tr, class Variant>
__device__ __forceinline__ void score_step(float (&s)[Tr::kBlockN / 2], const RowMask& mask,
                                           const KeyBlocks& blocks, const FragmentCoord& at,
                                           int row_base, int n_block,
                                           const typename Variant::Score& score) {
  if constexpr (Variant::kLowerEnds) {
    if (blocks.lower_end_in<true>(n_block))
      return mask_scores<true, Tr>(s, mask, at, row_base, n_block, score);
  }
  mask_scores<false, Tr>(s, mask, at, row_base, n_block, score);
}

}  // namespace flashattn::cuda::sm90
