// K and V split once per call, before the attention kernel: every query tile of
// a head reads the same key blocks, so splitting them there would repeat the
// work once per query tile. One block per (batch, kv head, key block) stages the
// block's fp32 K and V rows and writes their hi/lo fp16 halves, zero-padded to
// whole key blocks and kD columns, with the scales:
//   K: one per key block (a block-wide maximum), so a score tile has one scale per row;
//   V: one per key block and 8 output columns (the scale of an n8 column of P·V).
#pragma once

#include <cstdint>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/sm80/f16x3/group_split.cuh"
#include "core/params.h"

namespace flashattn::cuda::f16x3 {

// The split K and V in scratch memory; bh = batch · heads_kv + kv head.
struct SplitKV {
  uint16_t *k_hi, *k_lo, *v_hi, *v_lo;  // [bh][rows][kD] fp16
  float* k_unscale;                     // [bh][rows / kBlockN]: 2^-e
  float* v_unscale;                     // [bh][rows / kBlockN][kD / 8]: 2^-e
  int rows;                             // seqlen_k rounded up to whole key blocks
};

// Row-major rows of kCols fp16 values, in 16-byte chunks.
template <int kCols>
struct RowMajorHalves {
  __device__ __forceinline__ static uint32_t offset(int r, int chunk) {
    return uint32_t(r * kCols * 2 + chunk * 16);
  }
};

constexpr int kSplitThreads = 128;

template <int kD, int kBlockN>
__global__ void __launch_bounds__(kSplitThreads)
    split_kv_kernel(const AttnParams p, const SplitKV kv, bool vec4) {
  __shared__ __align__(16) float stage_k[kBlockN][kD + kFp32TilePad];
  __shared__ __align__(16) float stage_v[kBlockN][kD + kFp32TilePad];
  __shared__ float warp_max[kSplitThreads / 32];
  constexpr int kWarps = kSplitThreads / 32, kGroups = kBlockN / 8 / kWarps;
  // The attention kernel may be scheduled from here on (it waits for this
  // grid's end before it reads the split K and V).
  launch_dependent_grids();
  const Sizes& s = p.sizes;
  const int blocks_per_head = kv.rows / kBlockN;
  const int key_block = int(blockIdx.x % blocks_per_head);
  const int64_t bh = blockIdx.x / blocks_per_head;
  const int b = int(bh / s.heads_kv), hk = int(bh % s.heads_kv), key0 = key_block * kBlockN;
  const float* k = static_cast<const float*>(p.k.data) + b * p.k.batch_stride +
                   hk * p.k.head_stride + int64_t(key0) * p.k.row_stride;
  const float* v = static_cast<const float*>(p.v.data) + b * p.v.batch_stride +
                   hk * p.v.head_stride + int64_t(key0) * p.v.row_stride;
  load_fp32_tile_async<kD, kBlockN, kSplitThreads>(stage_k, k, p.k.row_stride, s.seqlen_k - key0,
                                                   s.head_dim, vec4);
  load_fp32_tile_async<kD, kBlockN, kSplitThreads>(stage_v, v, p.v.row_stride, s.seqlen_k - key0,
                                                   s.head_dim, vec4);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = (bh * kv.rows + key0) * kD * 2;  // bytes to the block's first row
  using Rows = RowMajorHalves<kD>;
  // K: warp w takes the 8-row groups w, w + kWarps, ...; one scale for the block.
  RowShare<kD> share[kGroups];
  float mx = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    share[g].load(stage_k, 8 * (warp + kWarps * g));
    mx = fmaxf(mx, share[g].max_abs());
  }
  mx = lanes_max<31u>(mx);
  if (lane == 0) warp_max[warp] = mx;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, warp_max[w]);
  const int e = split_exponent(mx);
  if (threadIdx.x == 0) kv.k_unscale[bh * blocks_per_head + key_block] = exp2_int(-e);
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
    share[g].template store<Rows>(reinterpret_cast<char*>(kv.k_hi) + tile,
                                  reinterpret_cast<char*>(kv.k_lo) + tile, exp2_int(e));
  // V: warp w takes the 8-column groups w, w + kWarps, ...
  float* v_unscale = kv.v_unscale + (bh * blocks_per_head + key_block) * (kD / 8);
  for (int col8 = warp; col8 < kD / 8; col8 += kWarps)
    split_columns<Rows, kD, kBlockN>(stage_v, reinterpret_cast<char*>(kv.v_hi) + tile,
                                     reinterpret_cast<char*>(kv.v_lo) + tile, col8,
                                     v_unscale + col8);
}

}  // namespace flashattn::cuda::f16x3
