// The score step of the sm_80 tensor-core kernels: the variant (core/variant.h),
// then the mask (core/mask.h), applied to a warp's tile of scores in mma.sync's
// accumulator layout, s[mt][nt][e]: m16 slice mt, n8 key column nt; lane (g, t)
// = (lane / 4, lane % 4) holds rows g (e < 2) and g + 8 (e >= 2) of the slice and
// keys 8·nt + 2t + e % 2. Only key blocks that need the mask (KeyBlocks::
// needs_mask) call it, so whole blocks pay nothing; a kernel with a score variant
// calls it on every block (its scores all change).
#pragma once

#include <cmath>

#include "core/mask.h"
#include "core/variant.h"
#include "cuda/common/opaque.cuh"

namespace flashattn::cuda::sm80 {

// row0: the query row of the fragment's first row (slice 0, g = 0, h = 0);
// key0: the key of its first column. kLowerEnd: whether a row's key range may
// begin inside the block (KeyBlocks::lower_end_in; score_step below picks).
// bias: the bias's reader for its element type (Score::kBias), else NoBiasReader;
// a masked key's element is never read (keys past seqlen_k are masked).
template <bool kLowerEnd, int kMT, int kNT, typename Score, typename Bias>
__device__ __forceinline__ void mask_scores(const RowMask& mask, int row0, int key0,
                                            float (&s)[kMT][kNT][4], const Score& score,
                                            const Bias& bias) {
  const int lane = thread_index() % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * mt + g + 8 * h;
      // Column 8·nt + e of this thread holds key key0 + 2t + 8·nt + e.
      const int end = mask.key_end(row) - key0 - 2 * t;
      const int begin = kLowerEnd ? mask.key_begin(row) - key0 - 2 * t : 0;
      // ALiBi's distance of column 0, stepped by constants across the row.
      float distance0 = 0.0f;
      if constexpr (!Score::kIdentity) distance0 = score.distance(row, key0 + 2 * t);
      const auto* bias_row = bias.row_at(row);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][nt][2 * h + e];
          const bool masked = 8 * nt + e >= end || (kLowerEnd && 8 * nt + e < begin);
          if constexpr (!Score::kIdentity) x = score.at(x, distance0 - float(8 * nt + e));
          if constexpr (Score::kBias) {
            if (!masked) x += bias.at(bias_row, key0 + 2 * t + 8 * nt + e);
          }
          if (masked) x = -INFINITY;
        }
    }
}

template <bool kLowerEnd, int kMT, int kNT, typename Score>
__device__ __forceinline__ void mask_scores(const RowMask& mask, int row0, int key0,
                                            float (&s)[kMT][kNT][4], const Score& score) {
  if constexpr (Score::kBias)
    score.bias.read([&](const auto& bias) { mask_scores<kLowerEnd>(mask, row0, key0, s, score, bias); });
  else
    mask_scores<kLowerEnd>(mask, row0, key0, s, score, NoBiasReader{});
}

// The score step of key block n_block (of keys starting at key0) for a tile
// whose key blocks are `blocks`, in a kernel instantiated with Variant
// (core/variant.h), whose score functor for this tile's head is `score`.
template <class Variant, int kMT, int kNT>
__device__ __forceinline__ void score_step(const RowMask& mask, const KeyBlocks& blocks,
                                           int n_block, int row0, int key0,
                                           float (&s)[kMT][kNT][4],
                                           const typename Variant::Score& score) {
  if constexpr (Variant::kLowerEnds) {
    if (blocks.lower_end_in<true>(n_block)) return mask_scores<true>(mask, row0, key0, s, score);
  }
  mask_scores<false>(mask, row0, key0, s, score);
}

}  // namespace flashattn::cuda::sm80
