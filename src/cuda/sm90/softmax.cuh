// The online softmax of the Hopper forward, on a warpgroup's scores in wgmma's
// accumulator layout (FragmentCoord): the quantities and rules of
// core/softmax.h (m raw, c = scale·log2(e), the −inf guard of exponent_max),
// kept per fragment row.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/softmax.h"
#include "cuda/common/mma_16bit.cuh"

namespace flashattn::cuda::sm90 {

// A thread's place in the accumulator layout of m64nN: element i of its
// fragment is row row0 + 8·((i % 4) / 2), column 8·(i / 4) + 2·(lane % 4) + i % 2.
struct FragmentCoord {
  int row0;  // within the block's kBlockM rows
  int col0;  // 2·(lane % 4)
};

// The online-softmax update for one key block: raises the running maxima,
// turns s into unnormalised probabilities 2^((s − m)·c), adds them to the
// row sums (unless the tensor cores sum them, Traits::kRowSumsByMma), and
// returns each row's rescale factor for acc.
template <class Tr>
__device__ __forceinline__ void softmax_update(float (&s)[Tr::kBlockN / 2], float (&row_max)[2],
                                               float (&row_sum)[2], float (&alpha)[2], float c) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float block_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
      block_max = fmaxf(block_max, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
    block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
    block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
    const float m_new = fmaxf(row_max[half], block_max);
    const float m_scaled = exponent_max_c(m_new, c);
    alpha[half] = fast_exp2(row_max[half] * c - m_scaled);
    row_max[half] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * j + 2 * half + e];
        x = fast_exp2(fmaf(x, c, -m_scaled));
        if constexpr (!Tr::kRowSumsByMma) sum += x;
      }
    if constexpr (!Tr::kRowSumsByMma) row_sum[half] = row_sum[half] * alpha[half] + sum;
  }
}

template <typename T, class Tr>
__device__ __forceinline__ void pack_probabilities(const float (&s)[Tr::kBlockN / 2],
                                                   uint32_t (&p)[Tr::kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack_pair<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// Accumulators of a m64nN product (acc, or the row sums of kRowSumsByMma)
// times their rows' rescale factors.
template <int N>
__device__ __forceinline__ void rescale(float (&acc)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] *= alpha[(i % 4) / 2];
}

}  // namespace flashattn::cuda::sm90
