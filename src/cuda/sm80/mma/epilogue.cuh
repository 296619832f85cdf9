// cuda_mma's epilogue: the block's output rows, finished by the shared rule
// (core/softmax.h, finish_row: out = acc / l, lse = m·scale + ln l; 0 and −inf
// for rows the mask leaves without keys), staged as T through this warp's own
// rows of the Q tile (no other warp reads them) so that global stores are
// 16-byte rows.
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "core/softmax.h"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_shape.cuh"

namespace flashattn::cuda::mma {

// info: the block's BlockInfo (b, hq, the sequence's rows and mask, col0, vec16).
// kZeroSumEmpty: a bias or boolean mask may leave any row without keys
// (core/softmax.h, finished_empty). out_scale multiplies every output
// (dropout's keep scale, else 1).
template <typename T, typename Shape, bool kZeroSumEmpty, typename Info>
__device__ __forceinline__ void store_output(
    const AttnParams& p, const Info& info, char* q_tile,
    const float (&acc)[Shape::kMTiles][Shape::kOTiles][4], const float (&row_max)[Shape::kMTiles][2],
    const sm80::RowSums<Shape::kMTiles>& row_sum, float out_scale) {
  using QTile = typename Shape::QTile;
  constexpr int kOT = Shape::kOTiles;
  const Sizes& s = p.sizes;
  const sm80::ThreadCoord tc = sm80::thread_coord<Shape>();
  const int g = tc.lane / 4, t = tc.lane % 4;
  // The lse (a logarithm) only where it is stored (row_lse in the branch
  // below): asked of every row, it ran on every tile, lse or not, about 30
  // instructions a row that ptxas did not sink into the store's branch.
  FinishedRow<float> finished[Shape::kMTiles][2];
  float sums[Shape::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tc.warp_row0 + 16 * mt + g + 8 * h;
      sums[mt][h] = sm80::quad_sum(row_sum.l[mt][h]);
      finished[mt][h] = finish_row(
          row_max[mt][h] * p.softmax.scale, sums[mt][h],
          finished_empty<kZeroSumEmpty>(info.mask.empty(info.row0 + r), sums[mt][h]));
      finished[mt][h].inv_l *= out_scale;
    }
  const auto staged = [&](int r, int ot) {
    return reinterpret_cast<uint32_t*>(q_tile + QTile::offset(r, ot) + 4 * t);
  };
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tc.warp_row0 + 16 * mt + g + 8 * h;
      const FinishedRow<float>& row = finished[mt][h];
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot)
        *staged(r, ot) =
            pack_pair<T>(acc[mt][ot][2 * h] * row.inv_l, acc[mt][ot][2 * h + 1] * row.inv_l);
      if (p.softmax.lse && info.col0 == 0 && t == 0 && r < info.rows)
        p.softmax.lse[info.stats_row0 + info.row0 + r] =
            row_lse(row_max[mt][h] * p.softmax.scale, sums[mt][h], row.empty);
    }
  // A row that sees no key outputs 0 whatever acc holds (a masked key's 0·v can
  // leave a NaN there), as FinishedRow::out gives. Such rows are a sequence's
  // first (key_end grows with the row), so only a warp whose first row is one
  // writes zeros over them, where every element taking a select cost each tile
  // an instruction per output element (docs/perf/cuda_mma.md, v3.10). A bias
  // can empty any row.
  if (kZeroSumEmpty || info.mask.empty(info.row0 + tc.warp_row0)) {
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!finished[mt][h].empty) continue;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) *staged(tc.warp_row0 + 16 * mt + g + 8 * h, ot) = 0u;
      }
  }
  __syncwarp();
  auto* o = static_cast<uint16_t*>(p.o.data) + row_offset(p.o, info.b, info.q_row0 + info.row0) +
            info.hq * p.o.head_stride + info.col0;
  const int cols = min(Shape::kDV, s.head_dim_v - info.col0);
  if (info.vec16 && info.rows == Shape::kBlockM && cols == Shape::kDV) {
    // The whole tile exists: 16-byte stores without per-chunk bounds. The loop
    // below spends about 40 instructions on each chunk's bounds and addresses.
    for_each_warp_chunk<QTile, Shape::kWarpRows, kOT>(
        tc.lane, tc.warp_row0, [&](uint32_t offset, int r, int chunk) {
          *reinterpret_cast<uint4*>(o + r * p.o.row_stride + 8 * chunk) =
              *reinterpret_cast<const uint4*>(q_tile + offset);
        });
    return;
  }
#pragma unroll
  for (int e = tc.lane; e < Shape::kWarpRows * kOT; e += 32) {
    const int r = tc.warp_row0 + e / kOT, c0 = 8 * (e % kOT);
    if (r >= info.rows || c0 >= cols) continue;
    const uint4 chunk = *reinterpret_cast<const uint4*>(q_tile + QTile::offset(r, e % kOT));
    uint16_t* dst = o + r * p.o.row_stride + c0;
    if (info.vec16 && c0 + 8 <= cols) {
      *reinterpret_cast<uint4*>(dst) = chunk;
    } else {
      const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (c0 + j < cols) dst[j] = uint16_t(words[j / 2] >> (16 * (j % 2)));
    }
  }
}

}  // namespace flashattn::cuda::mma
