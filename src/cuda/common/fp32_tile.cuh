// fp32 tiles staged in shared memory as plain rows of kCols + kFp32TilePad
// floats: the pad makes the row pitch ≡ 4 (mod 32) words, so eight lanes reading
// the same columns of eight consecutive rows hit distinct banks.
#pragma once

#include <cstdint>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/opaque.cuh"

namespace flashattn::cuda {

constexpr int kFp32TilePad = 4;

// Whether q, k and v load in 16-byte copies: rows 16-byte aligned and head_dim
// whole float4s.
inline bool fp32_rows_vec4(const AttnParams& p) {
  bool vec4 = p.sizes.head_dim % 4 == 0;
  for (const TensorRef* t : {&p.q, &p.k, &p.v}) vec4 = vec4 && rows_16b_aligned(*t, sizeof(float));
  return vec4;
}

// Issues dst[r][c] = src[r·row_stride + c] for r < rows, c < cols, and 0
// elsewhere in the kRows × kCols tile, as cp.async copies by kThreads threads
// (not yet landed). vec4: src and row_stride are 16-byte aligned and cols % 4 == 0.
template <int kCols, int kRows, int kThreads>
__device__ void load_fp32_tile_async(float (*dst)[kCols + kFp32TilePad], const float* src,
                                     int64_t row_stride, int rows, int cols, bool vec4) {
  // Recomputed per call, not hoisted out of the caller's loop into registers.
  opaque(src), opaque(row_stride);
  const int tid = thread_index();
  if (vec4) {
    constexpr int kVecs = kCols / 4;
#pragma unroll 2
    for (int e = tid; e < kRows * kVecs; e += kThreads) {
      const int r = e / kVecs, c = (e % kVecs) * 4;
      const bool valid = r < rows && c < cols;
      cp_async_16(&dst[r][c], valid ? src + r * row_stride + c : src, valid);
    }
  } else {
#pragma unroll 2
    for (int e = tid; e < kRows * kCols; e += kThreads) {
      const int r = e / kCols, c = e % kCols;
      const bool valid = r < rows && c < cols;
      cp_async_4(&dst[r][c], valid ? src + r * row_stride + c : src, valid);
    }
  }
}

}  // namespace flashattn::cuda
