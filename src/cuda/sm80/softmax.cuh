// The online softmax of the sm_80 tensor-core kernels (cuda_mma, cuda_f16x3's
// narrow kernel), on a warp's scores in mma.sync's accumulator layout: the
// quantities and rules of core/softmax.h (m raw, c = scale·log2(e), the −inf
// guard of exponent_max), kept per fragment row, with the rescale skipped while
// no row of the warp grows by more than kRescaleSlack.
#pragma once

#include <cmath>

#include "core/softmax.h"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/common/opaque.cuh"

namespace flashattn::cuda::sm80 {

// A row's maximum is raised only when a block's scores exceed it by more than
// 2^kRescaleSlack in probability (8 in log2 units). Until then P = 2^(s·c − m·c)
// may reach 2^8, harmless in fp32 sums and in f16/bf16 P, and the O and l
// rescaling (one multiply per accumulator) is skipped for the whole warp:
// after the first few blocks it is almost never needed. O, l and lse all use
// the kept maximum, so the result is the same softmax.
constexpr float kRescaleSlack = 8.0f;

// A thread's running row sums l (two rows per m16 slice). With two m16 slices
// per warp (Shape::kRowSumsShared) they live in shared memory, one 16-byte slot
// per thread, read and written once per key block, and leave their registers to
// the accumulators: held in registers through the loop they are the first
// values ptxas spills at 128 × 128 tiles.
template <int kMT>
struct alignas(8 * kMT) RowSums {
  float l[kMT][2];
};

// This thread's row sums: its shared-memory slot, re-indexed at each use so that
// the slot's address is not held in a register either, or the register copy.
template <typename Shape>
__device__ __forceinline__ RowSums<Shape::kMTiles>& row_sum(RowSums<Shape::kMTiles>* slots,
                                                            RowSums<Shape::kMTiles>& registers) {
  if constexpr (Shape::kRowSumsShared) return slots[thread_index()];
  else return registers;
}

// Online softmax for one key block: raise row maxima (rescaling acc and l) where
// needed, then P = 2^(s·c − m·c + log2_bias) in place of s, in one FFMA + EX2, and
// l += Σ P in fp32. log2_bias scales P, l and acc alike (so out = acc / l is
// unchanged); a kernel that does not need it passes 0. The max is NaN-blind
// (fmaxf); a NaN score reaches l and acc through its P (core/softmax.h).
template <typename Shape>
__device__ __forceinline__ void online_softmax(
    float c, float log2_bias, float (&s)[Shape::kMTiles][Shape::kNTiles][4],
    float (&row_max)[Shape::kMTiles][2], RowSums<Shape::kMTiles>& row_sum_slot,
    float (&acc)[Shape::kMTiles][Shape::kOTiles][4]) {
  constexpr int kMT = Shape::kMTiles, kNT = Shape::kNTiles, kOT = Shape::kOTiles;
  RowSums<kMT> row_sum = row_sum_slot;
  float block_max[kMT][2];
  bool grows = false;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[mt][h];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      block_max[mt][h] = mx;
      // From -inf to finite grows (+inf > slack); -inf to -inf gives NaN, which does not.
      grows |= (mx - row_max[mt][h]) * c > kRescaleSlack;
    }
  if (__any_sync(0xffffffffu, grows)) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = block_max[mt][h];
        const float alpha = fast_exp2((row_max[mt][h] - exponent_max(mx)) * c);
        row_max[mt][h] = mx;
        row_sum.l[mt][h] *= alpha;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) acc[mt][ot][2 * h] *= alpha, acc[mt][ot][2 * h + 1] *= alpha;
      }
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float bias_minus_mc = log2_bias - exponent_max(row_max[mt][h]) * c;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], c, bias_minus_mc));
          sum += s[mt][nt][e];
        }
      row_sum.l[mt][h] += sum;
    }
  }
  row_sum_slot = row_sum;
}

// P as the A fragments of P·V, one per 16-key step: the accumulator layout of
// two adjacent 8-key columns of S is the A layout of one m16n8k16 step.
// visit(mt, kk, r, x0, x1) gets the two fp32 values that register r of the A
// fragment of step kk of m16 slice mt holds, as two 16-bit values.
template <typename Shape, typename Visit>
__device__ __forceinline__ void for_each_p_fragment(
    const float (&p)[Shape::kMTiles][Shape::kNTiles][4], Visit&& visit) {
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int kk = 0; kk < Shape::kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float(&pair)[4] = p[mt][2 * kk + r / 2];
        visit(mt, kk, r, pair[2 * (r % 2)], pair[2 * (r % 2) + 1]);
      }
}

// A row's sum over the four lanes of its quad (each holds a share of its keys).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashattn::cuda::sm80
