// The layout of the fp32 dQ sums that the backward's key-tile blocks (cuda_mma's
// and cuda_wgmma's) add into and dq_output.cu reads: per (batch, q head), rows_padded × cols floats cut into
// the 16 × 8 tiles of mma.sync's accumulator, row-major over tiles, each tile
// stored in the order its fragment sits in the warp (lane (g, t) holds rows g
// and g + 8, columns 2t and 2t + 1: 4 floats at 4·lane). So a warp adds a whole
// tile with one 16-byte reduction per lane, 512 contiguous bytes: against
// per-row addressing (8 rows × 32 bytes per instruction) that is a quarter of the
// L2 requests, which were what limited the kernel (docs/perf/cuda_mma_backward.md, v2).
#pragma once

#include <cstdint>

namespace flashattn::cuda {

// Offset, in floats from the head's first, of the 16 × 8 tile holding row r and
// column c (c a multiple of 8), for rows of `cols` floats.
__host__ __device__ __forceinline__ int64_t dq_tile_offset(int64_t r, int c, int cols) {
  return ((r / 16) * (cols / 8) + c / 8) * 128;
}

// Offset, inside its tile, of element (r % 16, c % 8) = (rr, cc).
__host__ __device__ __forceinline__ int dq_in_tile_offset(int rr, int cc) {
  return 4 * (4 * (rr % 8) + cc / 2) + 2 * (rr / 8) + cc % 2;
}

}  // namespace flashattn::cuda
