// The Hopper forward's epilogue: a warpgroup's finished rows (core/softmax.h,
// finish_row) staged through shared memory and stored by TMA, and their lse.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/softmax.h"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace flashattn::cuda::sm90 {

// A consumer warpgroup's part of a tile: its 64-row group, its kAccCols
// output columns from col0 (its P·V) and its kDepth columns of Q·Kᵀ's depth
// from depth0. Split by columns (Traits::kSplitColumns), both consumers hold
// rows 0–63, consumer 0 the first kFirstAccCols columns and kFirstDepth of the
// depth, consumer 1 the rest of each (kPart 1 where the shares differ in size,
// else both kPart 0); otherwise consumer w holds rows 64·w to +64, every
// column, the whole depth.
template <class Tr, int kPart>
struct ConsumerPart {
  static constexpr int kAccCols = kPart == 0 ? Tr::kFirstAccCols : Tr::kHeadDimPV - Tr::kFirstAccCols;
  static constexpr int kDepth = kPart == 0 ? Tr::kFirstDepth : Tr::kHeadDimQK - Tr::kFirstDepth;
  int group, col0;  // col0: a multiple of 64
  uint32_t depth0;
  __device__ __forceinline__ explicit ConsumerPart(int warpgroup)
      : group(Tr::kSplitColumns ? 0 : warpgroup),
        col0(Tr::kSplitColumns ? warpgroup * Tr::kFirstAccCols : 0),
        depth0(Tr::kSplitColumns ? uint32_t(warpgroup) * Tr::kFirstDepth : 0) {}
};

// Whether the consumers' column shares differ in size, so that each has its
// own code (ConsumerPart's kPart).
template <class Tr>
inline constexpr bool kUnevenShares =
    Tr::kSplitColumns && 2 * Tr::kFirstAccCols != Tr::kHeadDimPV;

// The first `rows` (< 64) of a warpgroup's staged output rows, written to the
// output by the warpgroup's threads in 16-byte chunks (v's head_dim is a
// multiple of 8, strides of 16 bytes: wgmma_unsupported). Packed batches' rows at a
// sequence's end, which a TMA store of the warpgroup's 64 would carry into
// the next sequence's.
template <typename T, class Tr, class Part>
__device__ __forceinline__ void store_rows(const KernelParams& p, const Tile& t,
                                           const uint8_t* smem, const Part& part, int rows) {
  constexpr int kChunks = Part::kAccCols / 8;  // 16-byte chunks of a staged row's part
  const int wg_row0 = t.row0 + 64 * part.group;
  T* out = static_cast<T*>(p.out.data) + (t.q_row0 + wg_row0) * p.out.row_stride +
           t.head_q * p.out.head_stride;
  for (int i = int(threadIdx.x) % 128; i < rows * kChunks; i += 128) {
    const int row = i / kChunks, col = part.col0 + 8 * (i % kChunks);
    if (col >= p.sizes.head_dim_v) continue;
    *reinterpret_cast<uint4*>(out + row * p.out.row_stride + col) = *reinterpret_cast<const uint4*>(
        smem + Tr::kOOffset + swizzled_offset(64 * part.group + row, col, Tr::kBlockM));
  }
}

// Named barriers: 1 to 3 gather one consumer warpgroup before its output
// store; 4 to 6 are the consumers' turns on the tensor cores, and 4 the
// split kernels' exchange of partial scores (they take no turns).
constexpr int kEpilogueBarrier = 1;
constexpr int kTurnBarrier = 4;
constexpr int kExchangeBarrier = 4;

// out = acc / l through the output staging buffer (this warpgroup's 64 rows of
// it) and TMA stores, which drop rows past seqlen_q and columns past v's head_dim;
// lse per row. Rows the mask leaves without keys get 0 and -inf (finish_row);
// `empty` (a constant at every call site): no row of the warpgroup saw a key,
// and acc (another tile's) does not reach the output. The stores are left in
// flight: the next epilogue (or the block's end) waits for them to have read
// the buffer. (acc is only read here: a write to it under a condition made
// ptxas serialise the kernel's wgmma, 0.7x measured.) kZeroSumEmpty: a bias
// or boolean mask may leave any row without keys (core/softmax.h,
// finished_empty); such rows take a select per element. out_scale multiplies
// every output (dropout's keep scale, else 1). mask: the tile's rows'
// (tile_mask). kPacked: a TMA store drops only rows past the tensor's end, so
// a warpgroup whose rows run past its sequence's end stores the rows up to it
// from the staging buffer by hand (store_rows). row_sum: the thread's part of
// its rows' sums, or, with Traits::kRowSumsByMma, the whole sums.
template <typename T, class Tr, bool kZeroSumEmpty, bool kPacked, int kPart>
__device__ __forceinline__ void epilogue(const KernelParams& p, const Tile& t,
                                         const RowMask& mask, uint8_t* smem,
                                         const float (&acc)[ConsumerPart<Tr, kPart>::kAccCols / 2],
                                         const float (&row_max)[2], const float (&row_sum)[2],
                                         bool empty, const FragmentCoord& at, int warpgroup,
                                         int warp, int lane, float out_scale) {
  // Both rows' sums and reciprocals in one branch-free stretch: out = acc / l
  // needs 1/l only to a 16-bit rounding, so one MUFU.RCP (fast_reciprocal)
  // stands for finish_row's correctly rounded one, whose range test and slow
  // path put two branches on every tile's path (with the lse's tests, ~10% of
  // a 128-key tile's stall samples at d 64, ncu; docs/perf/cuda_wgmma.md,
  // v4.30). Empty rows get 0, as finish_row gives; the lse (a logarithm) is
  // computed by row_lse only where it is stored.
  float l[2], inv_l[2];
  bool row_empty[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = row_sum[half];
    if constexpr (!Tr::kRowSumsByMma) {  // else each thread holds its rows' whole sums
      l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
      l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_empty[half] = finished_empty<kZeroSumEmpty>(
        empty || mask.empty(t.row0 + at.row0 + 8 * half), l[half]);
    inv_l[half] = row_empty[half] ? 0.0f : fast_reciprocal(l[half]) * out_scale;
  }
  using Part = ConsumerPart<Tr, kPart>;
  const Part part(warpgroup);
  const bool storer = warp == 0 && lane == 0;
  if (storer) tma_store_wait_read();  // the previous tile's output has left the buffer
  named_barrier_sync(kEpilogueBarrier + warpgroup, 128);
  const uint32_t so = static_cast<uint32_t>(__cvta_generic_to_shared(smem + Tr::kOOffset));
  const int stm_row = 64 * part.group + 16 * warp + lane % 16;
  // Lane l's stmatrix address is row l % 16 of the warp's 16, columns
  // 16·jj + 8·(l / 16) to +8: the 16 bytes it zeroes below if that row is empty.
  const auto chunk = [&](int jj) {
    return so + swizzled_offset(stm_row, part.col0 + 16 * jj + 8 * (lane / 16), Tr::kBlockM);
  };
#pragma unroll
  for (int jj = 0; jj < Part::kAccCols / 16; ++jj) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float row_inv_l = inv_l[q % 2];
      r[q] = empty || (kZeroSumEmpty && row_empty[q % 2])
                 ? 0u
                 : pack_pair<T>(acc[8 * jj + 2 * q] * row_inv_l,
                                acc[8 * jj + 2 * q + 1] * row_inv_l);
    }
    stmatrix_x4(chunk(jj), r[0], r[1], r[2], r[3]);
  }
  // A row that sees no key outputs 0 whatever acc holds (a masked key's 0·v can
  // leave a NaN there), as FinishedRow::out gives. Such rows are a sequence's
  // first (key_end grows with the row), so only a warp whose first row is one
  // writes zeros over them; a select per element (FinishedRow::out) cost every
  // tile 64 (d 128) to 128 (d 256) instructions on the path between its last
  // products and the next tile's (docs/perf/cuda_wgmma.md, v4.17).
  if (!empty && mask.empty(t.row0 + 64 * part.group + 16 * warp)) {
    __syncwarp();  // the warp's stmatrix writes land before the zeros
    if (mask.empty(t.row0 + stm_row)) {
#pragma unroll
      for (int jj = 0; jj < Part::kAccCols / 16; ++jj) store_zero_16(chunk(jj));
    }
  }
  fence_shared_to_async();
  named_barrier_sync(kEpilogueBarrier + warpgroup, 128);
  const int wg_row0 = t.row0 + 64 * part.group;
  // A warpgroup before row 0 has no rows; packed, one whose rows run past its
  // sequence's end stores them by hand.
  const bool whole = !kPacked || wg_row0 + 64 <= t.seqlen_q;
  if (storer && wg_row0 >= 0 && whole) {
    // A share that ends inside a panel (P·V 288 wide) leaves the panel's other
    // columns stale in the buffer: they lie past v's head_dim, so the store drops them.
    constexpr int kPanelCols = (Part::kAccCols + 63) / 64 * 64;
#pragma unroll
    for (int panel = part.col0 / 64; panel < (part.col0 + kPanelCols) / 64; ++panel)
      tma_store(&p.o, 64 * panel, t.q_row0 + wg_row0, t.head_q, kPacked ? 0 : t.batch,
                smem + Tr::kOOffset + panel * Tr::kBlockM * 128 + 64 * part.group * 128);
    tma_store_commit();
  }
  if constexpr (kPacked) {
    if (!whole && wg_row0 >= 0) store_rows<T, Tr>(p, t, smem, part, t.seqlen_q - wg_row0);
  }
  // Split by columns, both consumers hold every row's statistics; the first stores them.
  if (p.lse != nullptr && part.col0 == 0 && lane % 4 == 0) {
    // (batch, heads_q, seqlen_q) dense, (heads_q, total_q) packed (core/seqlen.h).
    const int64_t lse_row0 =
        kPacked ? t.head_q * p.total_q + t.q_row0
                : (int64_t(t.batch) * p.sizes.heads_q + t.head_q) * p.sizes.seqlen_q;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = t.row0 + at.row0 + 8 * half;
      if (row >= 0 && row < t.seqlen_q)
        p.lse[lse_row0 + row] = row_lse(row_max[half] * p.scale, l[half], row_empty[half]);
    }
  }
}

}  // namespace flashattn::cuda::sm90
