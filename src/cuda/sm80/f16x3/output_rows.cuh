// Where a cuda_f16x3 block writes its finished rows: p's output and lse when
// the keys were not split, else its split's partial rows for the merge
// (cuda/common/combine.h). Both attention kernels end with it.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/params.h"
#include "core/softmax.h"
#include "cuda/common/combine.h"
#include "cuda/common/split_f16.cuh"
#include "cuda/common/tile_scheduler.cuh"

namespace flashattn::cuda::f16x3 {

struct OutputRows {
  const AttnParams& p;
  const KeySplit& split;
  TileCoord tc;
  int64_t split_rows0;  // this split's first row of (batch, q head) in the partials
  float* lse;           // lse of (batch, q head) row 0, or nullptr when none is wanted

  __device__ __forceinline__ OutputRows(const AttnParams& params, const KeySplit& key_split,
                                        TileCoord coord)
      : p(params), split(key_split), tc(coord) {
    const Sizes& s = p.sizes;
    const int64_t head_row0 = (int64_t(tc.b) * s.heads_q + tc.hq) * s.seqlen_q;
    split_rows0 = int64_t(blockIdx.y) * s.batch * s.heads_q * s.seqlen_q + head_row0;
    lse = split.count > 1 ? split.lse + split_rows0
          : p.softmax.lse ? p.softmax.lse + head_row0
                          : nullptr;
  }

  // Writes out = acc / l for this thread's columns of query row `row` (half h of
  // its accumulator tiles, columns col0 + 8·ot + 2t + e) and, if write_lse, the
  // row's lse from its raw maximum; l carries P's 2^kPLog2Bias. empty: the row
  // saw no key in the keys this block walked (core/softmax.h, finish_row).
  template <int kOT>
  __device__ __forceinline__ void store(int row, int h, int col0, const float (&acc)[kOT][4],
                                        float l, float row_max, bool empty,
                                        bool write_lse) const {
    const Sizes& s = p.sizes;
    const int t = threadIdx.x % 4;
    // The lse (a logarithm) by row_lse after the stores, only where it is stored.
    const float m_natural = row_max * p.softmax.scale - kPLog2Bias * kLn2;
    FinishedRow<float> finished = finish_row(m_natural, l, empty);
    finished.inv_l *= p.dropout.keep_scale;  // dropout's (core/dropout.h); 1 without
    float* o_row = split.count == 1
                       ? static_cast<float*>(p.o.data) + tc.b * p.o.batch_stride +
                             tc.hq * p.o.head_stride + int64_t(row) * p.o.row_stride
                       : split.out + (split_rows0 + row) * s.head_dim;
    // A thread's two adjacent columns as one 8-byte store where the row is 8-byte
    // aligned (the partials' always; p's output when its base and strides allow):
    // half the store instructions, and each 32-byte sector written whole by its
    // four lanes where element stores wrote it in two halves.
    const bool pairs = reinterpret_cast<uintptr_t>(o_row) % sizeof(float2) == 0;
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot) {
      const int col = col0 + 8 * ot + 2 * t;
      const float x = finished.out(acc[ot][2 * h]), y = finished.out(acc[ot][2 * h + 1]);
      if (pairs && col + 1 < s.head_dim) {
        *reinterpret_cast<float2*>(o_row + col) = make_float2(x, y);
      } else {
        if (col < s.head_dim) o_row[col] = x;
        if (col + 1 < s.head_dim) o_row[col + 1] = y;
      }
    }
    if (lse && write_lse) lse[row] = row_lse(m_natural, l, empty);
  }
};

}  // namespace flashattn::cuda::f16x3
