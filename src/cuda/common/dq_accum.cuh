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

// Where the sums of (sequence b, query head hq) start, in floats; rows of
// `cols` floats. Dense: (batch, heads_q) blocks of head_rows (the query tiles'
// rows). Packed (a variable-length batch): per query head, head_rows rows in
// which sequence b's start at its first row rounded down to 16 plus
// b·(block_m + 16), so that each sequence's query tiles (its rows rounded up to
// block_m) end before the next sequence's begin, and the sums take O(total
// rows), not the batch times the longest sequence.
struct DqLayout {
  int64_t head_rows;
  int block_m, cols, heads_q;
  bool packed;
  __host__ __device__ __forceinline__ int64_t base(int b, int hq, int64_t q_row0) const {
    if (!packed) return (int64_t(b) * heads_q + hq) * head_rows * cols;
    return (hq * head_rows + q_row0 / 16 * 16 + int64_t(b) * (block_m + 16)) * cols;
  }
};

}  // namespace flashattn::cuda
