// K and V split for the wide-head kernel (wide_kernel.cuh), once per call, into
// mma fragment order: a "unit" is the B operand of one m16n8k16 pair of mma as
// 32 lanes × 16 bytes of hi, then 32 lanes × 16 bytes of lo (1 KB), so that lane L
// of the attention kernel fetches its own four registers with one 16-byte copy
// and no warp ever shuffles or re-lays out K or V. With g = L / 4, t = L % 4:
//   K unit (16 keys p, 16 columns kk): keys 16p + g and 16p + 8 + g, columns
//     16kk + {2t, 2t+1, 2t+8, 2t+9}  (B of S = Q·Kᵀ for two 8-key tiles);
//   V unit (16 keys j, 16 columns c): columns 16c + g and 16c + 8 + g, keys
//     16j + {2t, 2t+1, 2t+8, 2t+9}   (B of P·V for two 8-column tiles).
// Scales (common/split_f16.cuh): K one per key (over all of head_dim), so a score
// is unscaled by its query row's and its key's factor; V one per unit (16 keys ×
// 16 columns), applied to each unit's short mma chain as it is added to the output.
// One block per (batch · kv head, 16 keys) and tensor (K or V) stages the fp32
// rows, zero-padded past seqlen_k and head_dim.
#pragma once

#include <cstdint>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/split_f16.cuh"
#include "cuda/sm80/f16x3/group_split.cuh"
#include "core/params.h"

namespace flashattn::cuda::f16x3 {

// One unit: hi[lane] then lo[lane].
struct FragmentUnit {
  uint4 hi[32], lo[32];
};

// The split K and V in scratch memory, in the order the attention kernel's
// warps consume them: per (batch · kv head, key chunk, warp) one run of units,
// so that a warp's stream of units only ever steps to the next one within a
// chunk (wide_kernel.cuh, UnitStream). bh = batch · heads_kv + kv head.
struct WideSplitKV {
  FragmentUnit* units;  // [bh][chunk][warp][UnitRuns::kRun]
  float* k_unscale;     // [bh][rows]: 2^-e per key
  float* v_unscale;     // [bh][chunk][warp][kD / 16]: 2^-e per V unit, as the run's V units
  int rows;             // seqlen_k rounded up to whole key chunks of the attention kernel
};

// Where each unit of (batch · kv head) lies, counted from its first run. The
// attention kernel's warp w takes, in key chunk n (kWarps key steps of 16):
// the K units of key step s = n·kWarps + w, column pairs 0 … kD/16 − 1 (its keys
// of S), then the V units of the chunk's key steps j = 0 … kWarps − 1 at column
// pairs 8w … 8w + 7 (its output columns of P·V), j outer.
template <int kD>
struct UnitRuns {
  static constexpr int kWarps = kD / 128;  // the attention kernel's warps
  static constexpr int kPairs = kD / 16;   // units of a phase: 16-column pairs of K; V's j × 8
  static constexpr int kRun = 2 * kPairs;  // units a warp takes per key chunk

  // bh's first unit and first V scale, of `steps` key steps: a run and a run's
  // V scales per step.
  __device__ static int64_t head_units(int64_t bh, int64_t steps) { return bh * steps * kRun; }
  __device__ static int64_t head_scales(int64_t bh, int64_t steps) { return bh * steps * kPairs; }
  // The first unit, and the first V scale, of the run of warp w in key chunk n.
  __device__ static int64_t run(int chunk, int warp) {
    return (int64_t(chunk) * kWarps + warp) * kRun;
  }
  __device__ static int64_t run_scales(int chunk, int warp) {
    return (int64_t(chunk) * kWarps + warp) * kPairs;
  }
  // Unit of key step s and column pair c: of K, of V; and V's scale of it.
  __device__ static int64_t k_unit(int s, int c) { return run(s / kWarps, s % kWarps) + c; }
  __device__ static int64_t v_unit(int s, int c) {
    return run(s / kWarps, c / 8) + kPairs + 8 * (s % kWarps) + c % 8;
  }
  __device__ static int64_t v_scale(int s, int c) {
    return run_scales(s / kWarps, c / 8) + 8 * (s % kWarps) + c % 8;
  }
};

constexpr int kWideSplitThreads = 256;

template <int kD>
struct WideSplitStage {
  float x[16][kD + kFp32TilePad];
  float key_scale[16];  // K: 2^e per key
};

// Four values of a lane's unit, scaled by s, split into its hi and lo registers
// r (x0, x1) and r + 1 (x2, x3).
__device__ __forceinline__ void split_into(uint32_t (&hi)[4], uint32_t (&lo)[4], int r,
                                           float x0, float x1, float x2, float x3, float s) {
  const HalfPairs a = split_pair(x0 * s, x1 * s), b = split_pair(x2 * s, x3 * s);
  hi[r] = a.hi, lo[r] = a.lo, hi[r + 1] = b.hi, lo[r + 1] = b.lo;
}

__device__ __forceinline__ void store_unit_lane(FragmentUnit* unit, int lane,
                                                const uint32_t (&hi)[4], const uint32_t (&lo)[4]) {
  unit->hi[lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  unit->lo[lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
}

// K's units of the staged keys, one scale per key: warp w takes keys 2w, 2w + 1
// for the scales, then units w, w + kWarps, ...
template <int kD>
__device__ __forceinline__ void split_keys(WideSplitStage<kD>& st, FragmentUnit* units,
                                           float* unscale) {
  constexpr int kWarps = kWideSplitThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 2 * warp + i;
    float mx = 0.0f;
    for (int c = lane; c < kD; c += 32) mx = fmaxf(mx, finite_abs(st.x[r][c]));
    const int e = split_exponent(lanes_max<31u>(mx));
    if (lane == 0) st.key_scale[r] = exp2_int(e), unscale[r] = exp2_int(-e);
  }
  __syncthreads();
  for (int kk = warp; kk < kD / 16; kk += kWarps) {
    const int c = 16 * kk + 2 * t;
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // keys g and g + 8
      const float* row = st.x[g + 8 * half];
      split_into(hi, lo, 2 * half, row[c], row[c + 1], row[c + 8], row[c + 9],
                 st.key_scale[g + 8 * half]);
    }
    store_unit_lane(units + kk, lane, hi, lo);
  }
}

// V's units of the staged keys (key step `step` of bh, whose units and scales
// start at units and unscale), one scale per unit (its maximum over the warp):
// warp w takes units w, w + kWarps, ...
template <int kD>
__device__ __forceinline__ void split_values(const WideSplitStage<kD>& st, FragmentUnit* units,
                                             float* unscale, int step) {
  constexpr int kWarps = kWideSplitThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int cu = warp; cu < kD / 16; cu += kWarps) {
    float x[2][4];
    float mx = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // columns 16cu + g and 16cu + 8 + g
      const int col = 16 * cu + 8 * half + g;
      x[half][0] = st.x[2 * t][col], x[half][1] = st.x[2 * t + 1][col];
      x[half][2] = st.x[2 * t + 8][col], x[half][3] = st.x[2 * t + 9][col];
#pragma unroll
      for (int i = 0; i < 4; ++i) mx = fmaxf(mx, finite_abs(x[half][i]));
    }
    const int e = split_exponent(lanes_max<31u>(mx));
    if (lane == 0) unscale[UnitRuns<kD>::v_scale(step, cu)] = exp2_int(-e);
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int half = 0; half < 2; ++half)
      split_into(hi, lo, 2 * half, x[half][0], x[half][1], x[half][2], x[half][3], exp2_int(e));
    store_unit_lane(units + UnitRuns<kD>::v_unit(step, cu), lane, hi, lo);
  }
}

// Block 2·i splits K's step i (of all (batch · kv head, 16 keys) steps), block
// 2·i + 1 V's.
template <int kD>
__global__ void __launch_bounds__(kWideSplitThreads)
    wide_split_kernel(const AttnParams p, const WideSplitKV kv, bool vec4) {
  // The attention kernel may be scheduled from here on (it waits for this
  // grid's end before it reads the split K and V): its launch and its Q split
  // pass under this kernel.
  launch_dependent_grids();
  extern __shared__ float4 smem[];
  auto& st = *reinterpret_cast<WideSplitStage<kD>*>(smem);
  const Sizes& s = p.sizes;
  const bool values = blockIdx.x % 2;
  const int steps = kv.rows / 16;
  const int step = int(blockIdx.x / 2 % steps);
  const int64_t bh = blockIdx.x / 2 / steps;
  const int b = int(bh / s.heads_kv), hk = int(bh % s.heads_kv), key0 = 16 * step;
  const TensorRef& src = values ? p.v : p.k;
  const float* x = static_cast<const float*>(src.data) + b * src.batch_stride +
                   hk * src.head_stride + int64_t(key0) * src.row_stride;
  load_fp32_tile_async<kD, 16, kWideSplitThreads>(st.x, x, src.row_stride, s.seqlen_k - key0,
                                                  s.head_dim, vec4);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  FragmentUnit* units = kv.units + UnitRuns<kD>::head_units(bh, steps);
  if (values) split_values<kD>(st, units, kv.v_unscale + UnitRuns<kD>::head_scales(bh, steps), step);
  else split_keys<kD>(st, units + UnitRuns<kD>::k_unit(step, 0), kv.k_unscale + bh * kv.rows + key0);
}

}  // namespace flashattn::cuda::f16x3
