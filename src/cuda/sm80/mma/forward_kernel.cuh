// The 16-bit attention forward on tensor cores (mma.sync m16n8k16, fp32
// accumulation), FlashAttention-2 style, for sm_80 and later.
//
// A block of kWarps warps owns kBlockM query rows of one (batch, q head) and kDV
// output columns (all of head_dim up to 256; head dims up to 512 run one block
// per 256-column slice, each recomputing the scores). Each warp owns kWarpRows
// whole rows, so row maxima and sums need only the four lanes of a quad.
// Per query row i, with c = scale·log2(e):
//   m_i = max over keys seen of s_ij (raw scores),
//   l_i = Σ_j 2^((s_ij − m_i)·c),  acc_i = Σ_j 2^((s_ij − m_i)·c)·v_j,  out_i = acc_i / l_i,
// and acc_i, l_i are rescaled by 2^((m_old − m_new)·c) when m_i grows.
//
// The key blocks the tile sees (core/mask.h) are walked from the last down to
// the first, so the few blocks that need masking (the causal diagonal, the
// ragged end of seqlen_k) come first and the rest run without per-element
// checks (cuda/sm80/score.cuh); blocks no row sees are never visited (a
// window's blocks below its lower end included). The Variant (core/variant.h)
// is a template parameter: with a score variant every block takes the score
// step; NoVariant compiles to the plain kernel. K and V of a block are loaded by
// cp.async into one buffer each, alternating so every load overlaps a product:
//   wait K_j · S = Q·K_jᵀ (V_j's load issued after its first fragments) · mask · wait V_j ·
//   load K_{j−1} · softmax · acc += P·V_j.
// P never leaves registers: the accumulator layout of two adjacent 8-key
// columns of S is the A-operand layout of one 16-key step of P·V.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "cuda/common/dropout.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/sm80/mma/epilogue.cuh"
#include "cuda/sm80/score.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_shape.cuh"

namespace flashattn::cuda::mma {

using sm80::ThreadCoord;
using sm80::thread_coord;

// s[mt][n] += Q(warp rows)·K(block)ᵀ over all kD columns. issue_after_first_loads()
// runs once, right after the first Q and K fragments are requested from shared memory
// (the caller's V loads go there: see attend_block).
template <typename T, typename Shape, typename IssueAfterFirstLoads>
__device__ __forceinline__ void scores_mma(uint32_t sq, uint32_t sk, int warp_row0, int lane,
                                           float (&s)[Shape::kMTiles][Shape::kNTiles][4],
                                           IssueAfterFirstLoads&& issue_after_first_loads) {
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  const auto q_lane = QTile::lane(sq, warp_row0 + lane % 16, lane / 16);
  const auto k_lane = KTile::lane(sk, 8 * (lane / 16) + lane % 8, (lane / 8) % 2);
#pragma unroll
  for (int kk = 0; kk < Shape::kD / 16; ++kk) {
    uint32_t a[Shape::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt)
      ldmatrix_x4(a[mt], QTile::address(q_lane, 16 * mt, kk));
#pragma unroll
    for (int np = 0; np < Shape::kNTiles / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, KTile::address(k_lane, 16 * np, kk));
      if (kk == 0 && np == 0) issue_after_first_loads();
#pragma unroll
      for (int mt = 0; mt < Shape::kMTiles; ++mt)
        mma_two_tiles<T>(s[mt][2 * np], s[mt][2 * np + 1], a[mt], b);
    }
  }
}

// acc[mt][n] += P·V(block), P given as A fragments, one per 16-key step.
template <typename T, typename Shape>
__device__ __forceinline__ void values_mma(
    uint32_t sv, int lane, const uint32_t (&p)[Shape::kMTiles][Shape::kBlockN / 16][4],
    float (&acc)[Shape::kMTiles][Shape::kOTiles][4]) {
  using VTile = typename Shape::VTile;
  const auto v_lane = VTile::lane(sv, lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
#pragma unroll
  for (int kk = 0; kk < Shape::kBlockN / 16; ++kk)
#pragma unroll
    for (int dp = 0; dp < Shape::kOTiles / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, VTile::address(v_lane, 16 * kk, dp));
#pragma unroll
      for (int mt = 0; mt < Shape::kMTiles; ++mt)
        mma_two_tiles<T>(acc[mt][2 * dp], acc[mt][2 * dp + 1], p[mt][kk], b);
    }
}

// This block's place in the problem: computed once (integer divisions) and
// kept in shared memory, from where the attention loop re-reads what it needs
// at the cost of a shared load, instead of holding it in registers that the
// accumulators and scores need.
struct BlockInfo {
  const uint16_t* k;  // K of this (sequence, kv head)
  const uint16_t* v;  // V of this (sequence, kv head), from the block's first output column
  int64_t q_row0;     // the sequence's first row along q's and out's seqlen (0 dense)
  int64_t stats_row0; // its first row in lse (core/params.h)
  int b, hq;
  int row0, rows;     // first query row in the sequence, and how many of the tile's rows exist
  int seqlen_k;       // the sequence's keys
  int col0;           // first output column of this block's slice
  RowMask mask;       // the sequence's (core/params.h: row_mask)
  KeyBlocks blocks;   // the key blocks the tile visits, and those it sees whole
  bool vec16;         // all of q, k, v, out 16-byte aligned rows: cp.async and vector stores
};

// rows <= 0: the tile lies past a shorter sequence of a packed batch.
template <typename Shape>
__device__ __forceinline__ BlockInfo block_info(const AttnParams& p, const TileDivisors& tiles,
                                                bool vec16) {
  const TileCoord tc = tile_coord(tiles);
  const Sequence seq = sequence(p, tc.b);
  BlockInfo info;
  info.q_row0 = seq.q_row0;
  info.stats_row0 = stats_row0(p, tc.b, tc.hq, seq);
  info.row0 = tc.m_block * Shape::kBlockM;
  info.rows = min(Shape::kBlockM, seq.seqlen_q - info.row0);
  info.seqlen_k = seq.seqlen_k;
  info.col0 = int(blockIdx.y) * Shape::kDV;
  info.b = tc.b;
  info.hq = tc.hq;
  info.mask = row_mask(p, seq);
  info.blocks = info.mask.key_blocks(info.row0, max(info.rows, 1), Shape::kBlockN);
  info.vec16 = vec16;
  info.k = static_cast<const uint16_t*>(p.k.data) + row_offset(p.k, tc.b, seq.k_row0) +
           tc.hk * p.k.head_stride;
  info.v = static_cast<const uint16_t*>(p.v.data) + row_offset(p.v, tc.b, seq.k_row0) +
           tc.hk * p.v.head_stride + info.col0;
  return info;
}

// Starts loading keys [key0, key0 + kBlockN) of K (all kD columns) into k_tile.
template <typename Shape, TileExtent kExtent>
__device__ __forceinline__ void load_keys(const AttnParams& p, const BlockInfo& info,
                                          char* k_tile, int key0) {
  load_tile<typename Shape::KTile, Shape::kThreads, kExtent>(
      k_tile, info.k + key0 * p.k.row_stride, p.k.row_stride, info.seqlen_k - key0,
      p.sizes.head_dim, info.vec16);
  cp_async_commit();
}

// V tiles, like K tiles, load without per-chunk bounds where whole
// (docs/perf/cuda_mma.md, v3.5), but not in the sm_80 build: there the
// head-dim-128 kernels, already at 255 registers, spill 4 bytes without them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kWholeValuesWithoutBounds = false;
#else
constexpr bool kWholeValuesWithoutBounds = true;
#endif

// Starts loading rows [key0, key0 + kBlockN) of this block's V column slice.
template <typename Shape, TileExtent kExtent>
__device__ __forceinline__ void load_values(const AttnParams& p, const BlockInfo& info,
                                            char* v_tile, int key0) {
  constexpr TileExtent kValues = kWholeValuesWithoutBounds ? kExtent : TileExtent::kBounded;
  load_tile<typename Shape::VTile, Shape::kThreads, kValues>(
      v_tile, info.v + key0 * p.v.row_stride, p.v.row_stride, info.seqlen_k - key0,
      p.sizes.head_dim_v - info.col0, info.vec16);
  cp_async_commit();
}

template <typename T, typename Shape, class Variant>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    forward_kernel(const AttnParams p, const TileDivisors tiles, bool vec16) {
  constexpr bool kLowerEnds = Variant::kLowerEnds;
  using Score = typename Variant::Score;
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  constexpr int kMT = Shape::kMTiles, kNT = Shape::kNTiles, kOT = Shape::kOTiles;
  constexpr int kBlockN = Shape::kBlockN;

  extern __shared__ __align__(128) char smem[];
  char* const q_tile = smem;
  char* const k_tile = q_tile + QTile::kBytes;
  char* const v_tile = k_tile + KTile::kBytes;
  const Sizes& s = p.sizes;
  __shared__ BlockInfo info;
  __shared__ Score score;  // the head's score functor, read per block from shared memory
  if (threadIdx.x == 0) {
    info = block_info<Shape>(p, tiles, vec16);
    score = Variant::score(p.scores, p.softmax.scale, info.b, info.hq, info.mask.alignment);
  }
  __syncthreads();
  if (info.rows <= 0) return;

  const KeyBlocks& blocks = info.blocks;
  if (blocks.end > blocks.first<kLowerEnds>()) {
    const T* q = static_cast<const T*>(p.q.data) + row_offset(p.q, info.b, info.q_row0 + info.row0) +
                 info.hq * p.q.head_stride;
    load_tile<QTile, Shape::kThreads>(q_tile, q, p.q.row_stride, info.rows, s.head_dim, vec16);
    load_keys<Shape, TileExtent::kChecked>(p, info, k_tile, (blocks.end - 1) * kBlockN);
  }

  float acc[kMT][kOT][4] = {};
  float row_max[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY;
  __shared__ sm80::RowSums<kMT> row_sum_slots[Shape::kRowSumsShared ? Shape::kThreads : 1];
  sm80::RowSums<kMT> row_sum_registers{};
  sm80::row_sum<Shape>(row_sum_slots, row_sum_registers) = sm80::RowSums<kMT>{};

  // One key block. `inner` (std::true_type) says that the block needs no mask and
  // that its V tile and the next K tile are whole (all rows and columns, rows
  // 16-byte aligned), so they load without bounds and nothing is checked.
  auto attend_block = [&](int n, auto inner) {
    constexpr bool kInner = decltype(inner)::value;
    constexpr TileExtent kExtent = kInner ? TileExtent::kWhole : TileExtent::kChecked;
    const int key0 = n * kBlockN;
    cp_async_wait<0>();
    __syncthreads();  // K_n has landed; every warp is done with V_{n+1}
    // V_n's copies start once the first products' fragments are requested: issued
    // before them, the tile's cp.async burst fills the memory-instruction queue and
    // the first ldmatrix waits behind it (docs/perf/cuda_mma.md, v3.14).
    float sc[kMT][kNT][4] = {};
    {
      const ThreadCoord tc = thread_coord<Shape>();
      scores_mma<T, Shape>(smem_address(q_tile), smem_address(k_tile), tc.warp_row0, tc.lane, sc,
                           [&] { load_values<Shape, kExtent>(p, info, v_tile, key0); });
    }
    // Some row's key range ends in the block, or a score variant changes every
    // score (a window alone only the cut blocks').
    if ((!Score::kIdentity && p.scores.any()) || (!kInner && info.blocks.needs_mask<kLowerEnds>(n)))
      sm80::score_step<Variant>(info.mask, info.blocks, n,
                                info.row0 + thread_coord<Shape>().warp_row0, key0, sc, score);

    cp_async_wait<0>();
    __syncthreads();  // V_n has landed; every warp is done with K_n
    if (n > info.blocks.first<kLowerEnds>()) load_keys<Shape, kExtent>(p, info, k_tile, key0 - kBlockN);

    sm80::online_softmax<Shape>(p.softmax.scale_log2, 0.0f, sc, row_max,
                                sm80::row_sum<Shape>(row_sum_slots, row_sum_registers), acc);
    // Dropout (core/dropout.h): the dropped probabilities, summed into l, leave P·V.
    if constexpr (Variant::kDropout) {
      if (p.dropout.on())
        drop_fragments(dropout_rows(p.dropout, info.b, s.heads_q, info.hq),
                       info.row0 + thread_coord<Shape>().warp_row0, key0, sc);
    }
    uint32_t pa[kMT][kBlockN / 16][4];
    sm80::for_each_p_fragment<Shape>(sc, [&](int mt, int kk, int r, float x0, float x1) {
      pa[mt][kk][r] = pack_pair<T>(x0, x1);
    });
    values_mma<T, Shape>(smem_address(v_tile), thread_coord<Shape>().lane, pa, acc);
  };
  // Blocks every row of the tile sees whole need no mask, and where both head
  // dims fill the bucket (so every column slice is whole too) their tiles are whole:
  // with Shape::kInnerLoop they run in a loop of their own. The key range's
  // lower end (blocks below unmasked_begin) needs the mask again.
  int n = blocks.end - 1;
  if constexpr (Shape::kInnerLoop) {
    const bool all_columns = vec16 && s.head_dim == Shape::kD && s.head_dim_v == Shape::kD;
    const int inner_begin = all_columns && kLowerEnds ? blocks.unmasked_begin
                                                      : blocks.first<kLowerEnds>();
    const int inner_end = all_columns ? max(inner_begin, min(blocks.end, blocks.unmasked_end))
                                      : blocks.first<kLowerEnds>();
    for (; n >= inner_end; --n) attend_block(n, std::false_type{});
    for (; n >= inner_begin; --n) attend_block(n, std::true_type{});
  }
  for (; n >= blocks.first<kLowerEnds>(); --n) attend_block(n, std::false_type{});
  store_output<T, Shape, Score::kBias>(p, info, q_tile, acc, row_max,
                                       sm80::row_sum<Shape>(row_sum_slots, row_sum_registers),
                                       Variant::kDropout ? p.dropout.keep_scale : 1.0f);
}

}  // namespace flashattn::cuda::mma
