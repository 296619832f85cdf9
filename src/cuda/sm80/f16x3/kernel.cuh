// The attention kernel of cuda_f16x3: exact fp32 attention on fp16 tensor cores
// (sm_80+), head_dim up to 128. Every product runs as three fp16 mma.sync on a
// scaled hi/lo split of its fp32 operands (common/split_f16.cuh), which keeps
// fp32 accuracy at twice the rate of TF32 mma and lets the 16-bit kernel's
// machinery (swizzled tiles, ldmatrix, P kept in registers) carry fp32.
//
// A block of 4 warps owns 64 query rows (16 per warp) of one (batch, q head),
// two blocks per SM, and walks its share of the visible key blocks from the last
// to the first, as the 16-bit kernel does. Instantiated per Variant
// (core/variant.h): AnyVariant's visible blocks start at a window's first, and
// its score step (softcap, ALiBi, then the mask) runs on every key block, where
// the plain kernel masks only the blocks that need it. Q is staged in fp32 and
// split per row here; K and V arrive already split (split_kv.cuh), K with one
// scale per key block, V with one per key block and 8 output columns. Then
//   s_ij = (Σ hi·hi + Σ (hi·lo + lo·hi)) · 2^-(e_i + e_block),
//   acc_i += (Σ P_hi·V_hi + Σ (P_hi·V_lo + P_lo·V_hi)) · 2^-e_col.
// Tensor cores truncate the fp32 accumulator on every mma, a bias that grows
// with the chain: the hi·hi terms therefore accumulate per key block only (at
// most 8 mma in a chain) and the small terms in their own accumulator, the two
// added in fp32 with round to nearest. P is split like the operands, raised by
// 2^kPLog2Bias so that its small values stay clear of fp16's subnormal range
// (acc and l carry the factor alike, so out = acc / l is unchanged).
//
// K and V tiles are double-buffered, each loaded a key block ahead:
//   wait K_n · load K_{n−1} · S = Q·K_nᵀ · score step · wait V_n · load V_{n−1} ·
//   softmax · acc += P·V_n.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/mask.h"
#include "core/variant.h"
#include "cuda/common/combine.h"
#include "cuda/common/dropout.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/split_f16.cuh"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/sm80/f16x3/group_split.cuh"
#include "cuda/sm80/f16x3/output_rows.cuh"
#include "cuda/sm80/f16x3/split_kv.cuh"
#include "cuda/sm80/score.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_shape.cuh"

namespace flashattn::cuda::f16x3 {

// 64 query rows, 16 per warp; 64 keys per block, 32 at kD = 128 (registers).
// Against 128-row blocks of 8 warps, one per SM, which read each key block once
// for twice the rows: 5–11% faster on every shape measured, as two blocks'
// barriers and loads overlap each other's products.
template <int kD>
constexpr int kBlockNFor = kD >= 128 ? 32 : 64;
template <int kD>
using ShapeFor = sm80::TileShape<kD, kD, 64, kBlockNFor<kD>, 4>;

template <typename Shape>
struct alignas(128) SharedTiles {
  static constexpr int kD = Shape::kD;
  struct KeyBlock {  // one buffer of the K and V tiles
    char k_hi[Shape::KTile::kBytes], k_lo[Shape::KTile::kBytes];
    char v_hi[Shape::VTile::kBytes], v_lo[Shape::VTile::kBytes];
  };
  char q_hi[Shape::QTile::kBytes], q_lo[Shape::QTile::kBytes];
  union {
    float q_stage[Shape::kBlockM][kD + kFp32TilePad];  // Q in fp32, before the key loop
    KeyBlock keys[2];
  };
  int64_t kv_head;                     // the block's batch · heads_kv + kv head
  KeyBlocks blocks;                    // the tile's key blocks, and those it sees whole
  float q_unscale[Shape::kBlockM];     // 2^-e per query row
  float k_unscale[2];                  // 2^-e per buffer's key block
  float v_unscale[2][Shape::kOTiles];  // 2^-e per buffer's 8 output columns
};

// Starts loading key block n's K (part 0) or V (1) tiles and scales into buffer
// `buf`, as one commit group. The kv head is re-read from shared memory: held in
// registers through the loop it spills at kD = 128, and recomputed from blockIdx
// (integer divisions) it cost 8% of the loop.
template <typename Shape>
__device__ __forceinline__ void load_key_block(const SplitKV& kv, int n, int part,
                                               SharedTiles<Shape>& sm, int buf) {
  constexpr int kD = Shape::kD, kBlockN = Shape::kBlockN;
  const int64_t bh = sm.kv_head;
  const int64_t row0 = bh * kv.rows + int64_t(n) * kBlockN;
  const int64_t block = bh * (kv.rows / kBlockN) + n;
  auto& keys = sm.keys[buf];
  const int tid = thread_index();
  if (part == 0) {
    load_tile<typename Shape::KTile, Shape::kThreads>(keys.k_hi, kv.k_hi + row0 * kD, kD, kBlockN,
                                                      kD, true);
    load_tile<typename Shape::KTile, Shape::kThreads>(keys.k_lo, kv.k_lo + row0 * kD, kD, kBlockN,
                                                      kD, true);
    if (tid == 0) cp_async_4(&sm.k_unscale[buf], kv.k_unscale + block, true);
  } else {
    load_tile<typename Shape::VTile, Shape::kThreads>(keys.v_hi, kv.v_hi + row0 * kD, kD, kBlockN,
                                                      kD, true);
    load_tile<typename Shape::VTile, Shape::kThreads>(keys.v_lo, kv.v_lo + row0 * kD, kD, kBlockN,
                                                      kD, true);
    if (tid < Shape::kOTiles)
      cp_async_4(&sm.v_unscale[buf][tid], kv.v_unscale + block * Shape::kOTiles + tid, true);
  }
  cp_async_commit();
}

// big += Q_hi·K_hiᵀ, small += Q_hi·K_loᵀ + Q_lo·K_hiᵀ over all kD columns, for the
// warp's 16 rows (ldmatrix lanes as in the 16-bit kernel). Addresses come from
// thread_index() afresh, so that they are not held in registers through the loop.
// Per 16 columns the three products go each over all key tiles in turn, so an
// mma waits on the one kNTiles before it, not on its neighbour.
template <typename Shape>
__device__ __forceinline__ void scores_mma(const SharedTiles<Shape>& sm, int buf,
                                           float (&big)[Shape::kNTiles][4],
                                           float (&small)[Shape::kNTiles][4]) {
  constexpr int kPairs = Shape::kNTiles / 2;
  const int lane = thread_index() % 32, warp_row0 = thread_index() / 32 * 16;
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  const auto q_lane = QTile::lane(smem_address(sm.q_hi), warp_row0 + lane % 16, lane / 16);
  const auto k_lane =
      KTile::lane(smem_address(sm.keys[buf].k_hi), 8 * (lane / 16) + lane % 8, (lane / 8) % 2);
  constexpr uint32_t kQLo = Shape::QTile::kBytes, kKLo = Shape::KTile::kBytes;  // lo follows hi
#pragma unroll
  for (int kk = 0; kk < Shape::kD / 16; ++kk) {
    uint32_t a_hi[4], a_lo[4], b_hi[kPairs][4], b_lo[kPairs][4];
    ldmatrix_x4(a_hi, QTile::address(q_lane, 0, kk));
    ldmatrix_x4(a_lo, QTile::address(q_lane, 0, kk) + kQLo);
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      ldmatrix_x4(b_hi[np], KTile::address(k_lane, 16 * np, kk));
      ldmatrix_x4(b_lo[np], KTile::address(k_lane, 16 * np, kk) + kKLo);
    }
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(big[2 * np], big[2 * np + 1], a_hi, b_hi[np]);
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(small[2 * np], small[2 * np + 1], a_hi, b_lo[np]);
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma_two_tiles<__half>(small[2 * np], small[2 * np + 1], a_lo, b_hi[np]);
  }
}

// acc += P·V for the warp's rows, P as hi/lo A fragments. Output column tiles go
// kGroup at a time (8, or 4 at kD = 128, whose accumulators leave fewer
// registers): one chain per tile over the block's keys, then scaled into acc;
// within a 16-key step each product runs over the whole group, for the same
// distance between dependent mma as in scores_mma.
template <typename Shape>
__device__ __forceinline__ void values_mma(const SharedTiles<Shape>& sm, int buf,
                                           const uint32_t (&p_hi)[Shape::kBlockN / 16][4],
                                           const uint32_t (&p_lo)[Shape::kBlockN / 16][4],
                                           float (&acc)[1][Shape::kOTiles][4]) {
  constexpr int kGroup = std::min(Shape::kOTiles, Shape::kD >= 128 ? 4 : 8), kPairs = kGroup / 2;
  const int lane = thread_index() % 32;
  using VTile = typename Shape::VTile;
  const auto v_lane =
      VTile::lane(smem_address(sm.keys[buf].v_hi), lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  constexpr uint32_t kVLo = Shape::VTile::kBytes;
#pragma unroll
  for (int ot0 = 0; ot0 < Shape::kOTiles; ot0 += kGroup) {
    float big[kGroup][4] = {}, small[kGroup][4] = {};
#pragma unroll
    for (int kk = 0; kk < Shape::kBlockN / 16; ++kk) {
      uint32_t b_hi[kPairs][4], b_lo[kPairs][4];
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp) {
        ldmatrix_x4_trans(b_hi[dp], VTile::address(v_lane, 16 * kk, ot0 / 2 + dp));
        ldmatrix_x4_trans(b_lo[dp], VTile::address(v_lane, 16 * kk, ot0 / 2 + dp) + kVLo);
      }
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(big[2 * dp], big[2 * dp + 1], p_hi[kk], b_hi[dp]);
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(small[2 * dp], small[2 * dp + 1], p_hi[kk], b_lo[dp]);
#pragma unroll
      for (int dp = 0; dp < kPairs; ++dp)
        mma_two_tiles<__half>(small[2 * dp], small[2 * dp + 1], p_lo[kk], b_hi[dp]);
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float unscale = sm.v_unscale[buf][ot0 + j];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[0][ot0 + j][e] = fmaf(big[j][e] + small[j][e], unscale, acc[0][ot0 + j][e]);
    }
  }
}

// The score functor of head hq (core/variant.h). A variant's is kept in shared
// memory, written by thread 0 and read after a barrier: held in registers
// through the key loop it spilled at kD = 128, as the kv head did.
template <class Variant>
__device__ __forceinline__ decltype(auto) tile_score(const AttnParams& p, int b, int hq,
                                                     int64_t alignment) {
  using Score = typename Variant::Score;
  if constexpr (Score::kIdentity) {
    return Score{};
  } else {
    __shared__ Score slot;
    if (threadIdx.x == 0) slot = Variant::score(p.scores, p.softmax.scale, b, hq, alignment);
    return static_cast<const Score&>(slot);
  }
}

template <class Variant, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 2)
    attention_kernel(const AttnParams p, const TileDivisors tiles, bool vec4, const SplitKV kv,
                     const KeySplit split) {
  constexpr int kD = Shape::kD, kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN;
  constexpr int kNT = Shape::kNTiles, kOT = Shape::kOTiles;
  extern __shared__ float4 smem[];
  SharedTiles<Shape>& sm = *reinterpret_cast<SharedTiles<Shape>*>(smem);
  const Sizes& s = p.sizes;
  const int lane = threadIdx.x % 32, warp_row0 = 16 * (threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;

  const TileCoord tc = tile_coord(tiles);
  if (threadIdx.x == 0) sm.kv_head = int64_t(tc.b) * s.heads_kv + tc.hk;  // read after a barrier
  const int row0 = tc.m_block * kBlockM, rows = min(kBlockM, s.seqlen_q - row0);
  const KeyBlocks blocks = dense_mask(p).key_blocks(row0, rows, kBlockN);
  const auto [first_block, end_block] = split_key_blocks<Variant::kLowerEnds>(blocks, split.count);
  if (threadIdx.x == 0) sm.blocks = blocks;
  const auto& score = tile_score<Variant>(p, tc.b, tc.hq, dense_mask(p).alignment);

  float q_unscale[2] = {1.0f, 1.0f};  // rows g and g + 8 of the warp
  if (end_block > first_block) {
    const float* q = static_cast<const float*>(p.q.data) + tc.b * p.q.batch_stride +
                     tc.hq * p.q.head_stride + int64_t(row0) * p.q.row_stride;
    load_fp32_tile_async<kD, kBlockM, Shape::kThreads>(sm.q_stage, q, p.q.row_stride, rows,
                                                       s.head_dim, vec4);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int half = 0; half < 2; ++half)
      split_rows<typename Shape::QTile, kD>(sm.q_stage, sm.q_hi, sm.q_lo, warp_row0 + 8 * half,
                                            sm.q_unscale + warp_row0 + 8 * half);
    __syncthreads();  // the stage is free for K and V; the warp's row scales are written
    q_unscale[0] = sm.q_unscale[warp_row0 + g];
    q_unscale[1] = sm.q_unscale[warp_row0 + g + 8];
  }
  // Launched while the split kernel (split_kv.cuh) may still run: its K and V
  // are read, and any output written, only from here on.
  wait_for_previous_grid();
  if (end_block > first_block) {
    load_key_block<Shape>(kv, end_block - 1, 0, sm, (end_block - 1) % 2);
    load_key_block<Shape>(kv, end_block - 1, 1, sm, (end_block - 1) % 2);
  }

  float acc[1][kOT][4] = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}};
  sm80::RowSums<1> row_sum{};
  const float c = p.softmax.scale_log2;

  for (int n = end_block - 1; n >= first_block; --n) {
    const int key0 = n * kBlockN, buf = n % 2;
    // In flight here: K_n, then V_n (one commit group each).
    cp_async_wait<1>();
    __syncthreads();  // K_n has landed; every warp is done with key block n + 1
    if (n > first_block) load_key_block<Shape>(kv, n - 1, 0, sm, 1 - buf);
    else cp_async_commit();  // an empty group keeps the count

    float sc[1][kNT][4] = {}, small[kNT][4] = {};
    scores_mma<Shape>(sm, buf, sc[0], small);
    const float unscale[2] = {q_unscale[0] * sm.k_unscale[buf], q_unscale[1] * sm.k_unscale[buf]};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[0][nt][e] = (sc[0][nt][e] + small[nt][e]) * unscale[e / 2];
    // A score variant changes every score; else only blocks that some row's key
    // range begins or ends inside take the step.
    if (!Variant::Score::kIdentity || sm.blocks.needs_mask<Variant::kLowerEnds>(n))
      sm80::score_step<Variant>(dense_mask(p), sm.blocks, n, row0 + warp_row0, key0, sc,
                                score);

    cp_async_wait<1>();  // of V_n and K_{n−1}
    __syncthreads();     // V_n has landed
    if (n > first_block) load_key_block<Shape>(kv, n - 1, 1, sm, 1 - buf);
    else cp_async_commit();

    sm80::online_softmax<Shape>(c, kPLog2Bias, sc, row_max, row_sum, acc);
    // Dropout (core/dropout.h): the dropped probabilities, summed into l, leave P·V.
    if constexpr (Variant::kDropout) {
      if (p.dropout.on())
        drop_fragments(dropout_rows(p.dropout, tc.b, s.heads_q, tc.hq), row0 + warp_row0, key0, sc);
    }
    uint32_t p_hi[kBlockN / 16][4], p_lo[kBlockN / 16][4];
    sm80::for_each_p_fragment<Shape>(sc, [&](int, int kk, int r, float x0, float x1) {
      const HalfPairs split = split_pair(x0, x1);
      p_hi[kk][r] = split.hi;
      p_lo[kk][r] = split.lo;
    });
    values_mma<Shape>(sm, buf, p_hi, p_lo, acc);
  }

  // One split writes p's output itself; several write their parts for the merge.
  const OutputRows out(p, split, tc);
  const RowMask& mask = dense_mask(p);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = sm80::quad_sum(row_sum.l[0][h]);
    const int row = row0 + warp_row0 + g + 8 * h;
    const bool empty = finished_empty<Variant::Score::kBias>(
        !mask.sees_keys_in(row, first_block * kBlockN, end_block * kBlockN), l);
    if (row < s.seqlen_q) out.store(row, h, 0, acc[0], l, row_max[0][h], empty, t == 0);
  }
}

}  // namespace flashattn::cuda::f16x3
