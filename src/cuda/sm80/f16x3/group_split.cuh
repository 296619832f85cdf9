// Splitting staged fp32 tiles into hi/lo fp16 tiles (common/split_f16.cuh), one
// power-of-two scale per group of values. A warp reads whole groups from the
// staging buffer (rows of kD + kFp32TilePad floats), so a group's maximum needs
// only shuffles, or a block-wide reduction where the group is a whole tile.
// Tile gives the byte offset of a 16-byte chunk (8 columns) of a row in the
// destination: a swizzled shared-memory tile or a plain row-major array.
#pragma once

#include <cstdint>

#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/lanes.cuh"
#include "cuda/common/opaque.cuh"
#include "cuda/common/split_f16.cuh"

namespace flashattn::cuda::f16x3 {

// The largest finite magnitude of x (finite_abs).
__device__ __forceinline__ float max_abs(float4 x) {
  return fmaxf(fmaxf(finite_abs(x.x), finite_abs(x.y)), fmaxf(finite_abs(x.z), finite_abs(x.w)));
}

// Splits 4 floats, scaled by s, into hi and lo at byte offset `offset` (8 bytes each).
__device__ __forceinline__ void store_split4(char* hi, char* lo, uint32_t offset, float4 x,
                                             float s) {
  const HalfPairs a = split_pair(x.x * s, x.y * s), b = split_pair(x.z * s, x.w * s);
  *reinterpret_cast<uint2*>(hi + offset) = make_uint2(a.hi, b.hi);
  *reinterpret_cast<uint2*>(lo + offset) = make_uint2(a.lo, b.lo);
}

// A lane's share of 8 staged rows [row0, row0 + 8): row L % 8 and the float4
// columns L / 8, L / 8 + 4, ... (eight lanes of one column read eight rows:
// distinct banks).
template <int kD>
struct RowShare {
  static constexpr int kVecs = kD / 16;
  float4 x[kVecs];
  int row;

  __device__ __forceinline__ void load(const float (*stage)[kD + kFp32TilePad], int row0) {
    const int lane = thread_index() % 32;
    row = row0 + lane % 8;
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      x[i] = *reinterpret_cast<const float4*>(&stage[row][4 * (lane / 8 + 4 * i)]);
  }
  __device__ __forceinline__ float max_abs() const {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) m = fmaxf(m, f16x3::max_abs(x[i]));
    return m;
  }
  // Writes the share, scaled by s, split into the hi/lo tiles.
  template <typename Tile>
  __device__ __forceinline__ void store(char* hi, char* lo, float s) const {
    const int lane = thread_index() % 32;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c4 = lane / 8 + 4 * i;  // float4 column: chunk c4 / 2, half c4 % 2
      store_split4(hi, lo, Tile::offset(row, c4 / 2) + 8 * (c4 % 2), x[i], s);
    }
  }
};

// Splits staged rows [row0, row0 + 8), each row with its own scale, 2^-e of row
// r written to unscale[r − row0].
template <typename Tile, int kD>
__device__ __forceinline__ void split_rows(const float (*stage)[kD + kFp32TilePad], char* hi,
                                           char* lo, int row0, float* unscale) {
  RowShare<kD> share;
  share.load(stage, row0);
  const int e = split_exponent(lanes_max<24u>(share.max_abs()));  // lanes of one row
  const int lane = thread_index() % 32;
  if (lane < 8) unscale[lane] = exp2_int(-e);
  share.template store<Tile>(hi, lo, exp2_int(e));
}

// Splits staged columns [8·col8, 8·col8 + 8) of the tile's kRows rows, one scale
// for all of them, its 2^-e written to *unscale. Lane L takes rows L, L + 32, ...
// (one 16-byte chunk each).
template <typename Tile, int kD, int kRows>
__device__ __forceinline__ void split_columns(const float (*stage)[kD + kFp32TilePad], char* hi,
                                              char* lo, int col8, float* unscale) {
  constexpr int kPerLane = kRows / 32;
  const int lane = thread_index() % 32;
  float4 x[kPerLane][2];
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      x[i][h] = *reinterpret_cast<const float4*>(&stage[lane + 32 * i][8 * col8 + 4 * h]);
      mx = fmaxf(mx, max_abs(x[i][h]));
    }
  const int e = split_exponent(lanes_max<31u>(mx));
  if (lane == 0) *unscale = exp2_int(-e);
  const float s = exp2_int(e);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store_split4(hi, lo, Tile::offset(lane + 32 * i, col8) + 8 * h, x[i][h], s);
}

}  // namespace flashattn::cuda::f16x3
