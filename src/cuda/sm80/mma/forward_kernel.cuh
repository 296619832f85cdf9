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
// The key blocks are walked from the last visible one down to 0, so the few
// blocks that need masking (the causal diagonal, the ragged end of seqlen_k)
// come first and the rest run without per-element checks; blocks wholly above
// the causal diagonal are never visited. K and V of a block are loaded by
// cp.async into one buffer each, alternating so every load overlaps a product:
//   wait K_j · load V_j · S = Q·K_jᵀ · mask · wait V_j · load K_{j−1} · softmax · acc += P·V_j.
// P never leaves registers: the accumulator layout of two adjacent 8-key
// columns of S is the A-operand layout of one 16-key step of P·V.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/mma_16bit.cuh"
#include "cuda/common/tile_grid.cuh"
#include "cuda/sm80/mma/smem_tile.cuh"
#include "params.h"

namespace flashattn::cuda::mma {

template <int kD_, int kDV_, int kBlockM_, int kBlockN_, int kWarps_>
struct TileShape {
  static constexpr int kD = kD_;    // Q and K columns: head_dim padded with zeros
  static constexpr int kDV = kDV_;  // output columns per block
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpRows / 16;  // m16 row slices per warp
  static constexpr int kNTiles = kBlockN / 8;     // n8 key columns of S
  static constexpr int kOTiles = kDV / 8;         // n8 output columns
  using QTile = SmemTile<kBlockM, kD>;            // also stages the output
  using KTile = SmemTile<kBlockN, kD>;
  using VTile = SmemTile<kBlockN, kDV>;
  static constexpr int kSmemBytes = QTile::kBytes + KTile::kBytes + VTile::kBytes;
  static constexpr bool kRowSumsShared = kMTiles > 1;  // see RowSums
  // Whether the unmasked blocks with whole tiles run in a loop of their own,
  // free of the per-block checks (perf-notes v3.7: +1.0 to 2.6% at head dim 256).
  // Not with two m16 slices per warp: those kernels already use 255 registers,
  // and the second loop body spills.
  static constexpr bool kInnerLoop = kMTiles == 1;
  static_assert(kWarpRows % 16 == 0 && kBlockN % 16 == 0 && kDV % 16 == 0 && kDV <= kD);
};

constexpr float kLog2e = 1.4426950408889634f;

// s[mt][n] += Q(warp rows)·K(block)ᵀ over all kD columns.
template <typename T, typename Shape>
__device__ __forceinline__ void scores_mma(uint32_t sq, uint32_t sk, int warp_row0, int lane,
                                           float (&s)[Shape::kMTiles][Shape::kNTiles][4]) {
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

// A row's maximum is raised only when a block's scores exceed it by more than
// 2^kRescaleSlack in probability (8 in log2 units). Until then P = 2^(s·c − m·c)
// may reach 2^8, harmless in fp32 sums and in f16/bf16 P, and the O and l
// rescaling (one multiply per accumulator) is skipped for the whole warp:
// after the first few blocks it is almost never needed. O, l and lse all use
// the kept maximum, so the result is the same softmax.
constexpr float kRescaleSlack = 8.0f;

// A thread's running row sums l (two rows per m16 slice). With two m16 slices
// per warp (Shape::kRowSumsShared) they live in shared memory, one 16-byte slot
// per thread, read and written once per key block, and leave their registers to
// the accumulators: held in registers through the loop they are the first
// values ptxas spills at 128 × 128 tiles.
template <int kMT>
struct alignas(8 * kMT) RowSums {
  float l[kMT][2];
};

// This thread's row sums: its shared-memory slot, re-indexed at each use so that
// the slot's address is not held in a register either, or the register copy.
template <typename Shape>
__device__ __forceinline__ RowSums<Shape::kMTiles>& row_sum(RowSums<Shape::kMTiles>* slots,
                                                            RowSums<Shape::kMTiles>& registers) {
  if constexpr (Shape::kRowSumsShared) return slots[thread_index()];
  else return registers;
}

// Online softmax for one key block: raise row maxima (rescaling acc and l) where
// needed, then P = 2^(s·c − m·c + log2_bias) in place of s, in one FFMA + EX2, and
// l += Σ P in fp32. log2_bias scales P, l and acc alike (so out = acc / l is
// unchanged); a kernel that does not need it passes 0.
template <typename Shape>
__device__ __forceinline__ void online_softmax(
    float c, float log2_bias, float (&s)[Shape::kMTiles][Shape::kNTiles][4],
    float (&row_max)[Shape::kMTiles][2], RowSums<Shape::kMTiles>& row_sum_slot,
    float (&acc)[Shape::kMTiles][Shape::kOTiles][4]) {
  constexpr int kMT = Shape::kMTiles, kNT = Shape::kNTiles, kOT = Shape::kOTiles;
  RowSums<kMT> row_sum = row_sum_slot;
  float block_max[kMT][2];
  bool grows = false;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[mt][h];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      block_max[mt][h] = mx;
      // From -inf to finite grows (+inf > slack); -inf to -inf gives NaN, which does not.
      grows |= (mx - row_max[mt][h]) * c > kRescaleSlack;
    }
  if (__any_sync(0xffffffffu, grows)) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = block_max[mt][h];
        // A row with no visible key yet keeps m = -inf; 0 stands in for it so
        // that -inf - -inf never makes a NaN (its alpha is then 0).
        const float alpha = fast_exp2((row_max[mt][h] - (mx == -INFINITY ? 0.0f : mx)) * c);
        row_max[mt][h] = mx;
        row_sum.l[mt][h] *= alpha;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) acc[mt][ot][2 * h] *= alpha, acc[mt][ot][2 * h + 1] *= alpha;
      }
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float bias_minus_mc =
          log2_bias - (row_max[mt][h] == -INFINITY ? 0.0f : row_max[mt][h]) * c;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], c, bias_minus_mc));
          sum += s[mt][nt][e];
        }
      row_sum.l[mt][h] += sum;
    }
  }
  row_sum_slot = row_sum;
}

// P as the A fragments of P·V, one per 16-key step: the accumulator layout of
// two adjacent 8-key columns of S is the A layout of one m16n8k16 step.
// visit(mt, kk, r, x0, x1) gets the two fp32 values that register r of the A
// fragment of step kk of m16 slice mt holds, as two 16-bit values.
template <typename Shape, typename Visit>
__device__ __forceinline__ void for_each_p_fragment(
    const float (&p)[Shape::kMTiles][Shape::kNTiles][4], Visit&& visit) {
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int kk = 0; kk < Shape::kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float(&pair)[4] = p[mt][2 * kk + r / 2];
        visit(mt, kk, r, pair[2 * (r % 2)], pair[2 * (r % 2) + 1]);
      }
}

// This block's place in the problem: computed once (integer divisions) and
// kept in shared memory, from where the attention loop re-reads what it needs
// at the cost of a shared load, instead of holding it in registers that the
// accumulators and scores need.
struct BlockInfo {
  const uint16_t* k;  // K of this (batch, kv head)
  const uint16_t* v;  // V of this (batch, kv head), from the block's first output column
  int b, hq;
  int row0, rows;     // first query row, and how many of the tile's rows exist
  int col0;           // first output column of this block's slice
  int key_end_first;  // keys visible to the first row (the fewest of the tile)
  bool vec16;         // all of q, k, v, out 16-byte aligned rows: cp.async and vector stores
};

template <typename Shape>
__device__ __forceinline__ BlockInfo block_info(const AttnParams& p, int m_blocks, bool vec16) {
  const Sizes& s = p.sizes;
  const TileCoord tc = tile_coord(s, m_blocks);
  BlockInfo info;
  // The query tiles of one (batch, head) run last to first: under a causal mask
  // the longest rows start first.
  info.row0 = (m_blocks - 1 - tc.m_block) * Shape::kBlockM;
  info.rows = min(Shape::kBlockM, s.seqlen_q - info.row0);
  info.col0 = int(blockIdx.y) * Shape::kDV;
  info.b = tc.b;
  info.hq = tc.hq;
  info.key_end_first = p.mask.key_end(info.row0, s.seqlen_k);
  info.vec16 = vec16;
  info.k = static_cast<const uint16_t*>(p.k.data) + tc.b * p.k.batch_stride + tc.hk * p.k.head_stride;
  info.v = static_cast<const uint16_t*>(p.v.data) + tc.b * p.v.batch_stride +
           tc.hk * p.v.head_stride + info.col0;
  return info;
}

// The calling thread's lane and the first tile row of its warp.
struct ThreadCoord {
  int lane, warp_row0;
};
template <typename Shape>
__device__ __forceinline__ ThreadCoord thread_coord() {
  const int tid = thread_index();
  return {tid % 32, tid / 32 * Shape::kWarpRows};
}

// Starts loading keys [key0, key0 + kBlockN) of K (all kD columns) into k_tile.
template <typename Shape, TileExtent kExtent>
__device__ __forceinline__ void load_keys(const AttnParams& p, const BlockInfo& info,
                                          char* k_tile, int key0) {
  load_tile<typename Shape::KTile, Shape::kThreads, kExtent>(
      k_tile, info.k + key0 * p.k.row_stride, p.k.row_stride, p.sizes.seqlen_k - key0,
      p.sizes.head_dim, info.vec16);
  cp_async_commit();
}

// V tiles, like K tiles, load without per-chunk bounds where whole (v3.5), but
// not in the sm_80 build: there the head-dim-128 kernels, already at 255
// registers, spill 4 bytes without them.
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
      v_tile, info.v + key0 * p.v.row_stride, p.v.row_stride, p.sizes.seqlen_k - key0,
      p.sizes.head_dim - info.col0, info.vec16);
  cp_async_commit();
}

// s = -inf where key key0 + column is not visible to the row (row0: the tile's
// first query row).
template <typename Shape>
__device__ __forceinline__ void mask_scores(const AttnParams& p, int row0, int key0,
                                            float (&s)[Shape::kMTiles][Shape::kNTiles][4]) {
  const ThreadCoord tc = thread_coord<Shape>();
  const int g = tc.lane / 4, t = tc.lane % 4;
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Column 8·nt + e of this thread holds key key0 + 2t + 8·nt + e.
      const int visible = p.mask.key_end(row0 + tc.warp_row0 + 16 * mt + g + 8 * h,
                                         p.sizes.seqlen_k) - key0 - 2 * t;
#pragma unroll
      for (int nt = 0; nt < Shape::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * nt + e >= visible) s[mt][nt][2 * h + e] = -INFINITY;
    }
}

// The block's output rows: out = acc / l and lse = m·scale + ln(l) (0 and -inf
// for rows that saw no key), staged as T through this warp's own rows of the Q
// tile (no other warp reads them) so that global stores are 16-byte rows.
template <typename T, typename Shape>
__device__ __forceinline__ void store_output(const AttnParams& p, const BlockInfo& info,
                                             char* q_tile,
                                             const float (&acc)[Shape::kMTiles][Shape::kOTiles][4],
                                             const float (&row_max)[Shape::kMTiles][2],
                                             const RowSums<Shape::kMTiles>& row_sum) {
  using QTile = typename Shape::QTile;
  constexpr int kOT = Shape::kOTiles;
  const Sizes& s = p.sizes;
  const ThreadCoord tc = thread_coord<Shape>();
  const int g = tc.lane / 4, t = tc.lane % 4;
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum.l[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = tc.warp_row0 + 16 * mt + g + 8 * h;
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot)
        *reinterpret_cast<uint32_t*>(q_tile + QTile::offset(r, ot) + 4 * t) =
            pack_pair<T>(acc[mt][ot][2 * h] * inv_l, acc[mt][ot][2 * h + 1] * inv_l);
      if (p.softmax.lse && info.col0 == 0 && t == 0 && r < info.rows)
        p.softmax.lse[(int64_t(info.b) * s.heads_q + info.hq) * s.seqlen_q + info.row0 + r] =
            l > 0.0f ? row_max[mt][h] * p.softmax.scale + logf(l) : -INFINITY;
    }
  __syncwarp();
  auto* o = static_cast<uint16_t*>(p.o.data) + info.b * p.o.batch_stride +
            info.hq * p.o.head_stride + info.row0 * p.o.row_stride + info.col0;
  const int cols = min(Shape::kDV, s.head_dim - info.col0);
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

template <typename T, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    forward_kernel(const AttnParams p, int m_blocks, bool vec16) {
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
  if (threadIdx.x == 0) info = block_info<Shape>(p, m_blocks, vec16);
  __syncthreads();

  // Keys [0, key_end(i)) are visible to row i, and key_end grows with i: the
  // tile's last row bounds the blocks to visit, its first row the blocks that
  // need no mask.
  const int n_blocks =
      (p.mask.key_end(info.row0 + info.rows - 1, s.seqlen_k) + kBlockN - 1) / kBlockN;
  if (n_blocks > 0) {
    const T* q = static_cast<const T*>(p.q.data) + info.b * p.q.batch_stride +
                 info.hq * p.q.head_stride + info.row0 * p.q.row_stride;
    load_tile<QTile, Shape::kThreads>(q_tile, q, p.q.row_stride, info.rows, s.head_dim, vec16);
    load_keys<Shape, TileExtent::kChecked>(p, info, k_tile, (n_blocks - 1) * kBlockN);
  }

  float acc[kMT][kOT][4] = {};
  float row_max[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY;
  __shared__ RowSums<kMT> row_sum_slots[Shape::kRowSumsShared ? Shape::kThreads : 1];
  RowSums<kMT> row_sum_registers{};
  row_sum<Shape>(row_sum_slots, row_sum_registers) = RowSums<kMT>{};

  // One key block. `inner` (std::true_type) says that the block needs no mask and
  // that its V tile and the next K tile are whole (all rows and columns, rows
  // 16-byte aligned), so they load without bounds and nothing is checked.
  auto attend_block = [&](int n, auto inner) {
    constexpr bool kInner = decltype(inner)::value;
    constexpr TileExtent kExtent = kInner ? TileExtent::kWhole : TileExtent::kChecked;
    const int key0 = n * kBlockN;
    cp_async_wait<0>();
    __syncthreads();  // K_n has landed; every warp is done with V_{n+1}
    load_values<Shape, kExtent>(p, info, v_tile, key0);

    float sc[kMT][kNT][4] = {};
    {
      const ThreadCoord tc = thread_coord<Shape>();
      scores_mma<T, Shape>(smem_address(q_tile), smem_address(k_tile), tc.warp_row0, tc.lane, sc);
    }
    if (!kInner && key0 + kBlockN > info.key_end_first)  // some row's key_end is in the block
      mask_scores<Shape>(p, info.row0, key0, sc);

    cp_async_wait<0>();
    __syncthreads();  // V_n has landed; every warp is done with K_n
    if (n > 0) load_keys<Shape, kExtent>(p, info, k_tile, key0 - kBlockN);

    online_softmax<Shape>(p.softmax.scale * kLog2e, 0.0f, sc, row_max,
                          row_sum<Shape>(row_sum_slots, row_sum_registers), acc);
    uint32_t pa[kMT][kBlockN / 16][4];
    for_each_p_fragment<Shape>(sc, [&](int mt, int kk, int r, float x0, float x1) {
      pa[mt][kk][r] = pack_pair<T>(x0, x1);
    });
    values_mma<T, Shape>(smem_address(v_tile), thread_coord<Shape>().lane, pa, acc);
  };
  int n = n_blocks - 1;
  if constexpr (Shape::kInnerLoop) {
    // Blocks below the first row's key_end need no mask, and where head_dim
    // fills the bucket (so every column slice is whole too) their tiles are
    // whole: they run in a loop of their own.
    const bool all_columns = vec16 && s.head_dim == Shape::kD;
    const int inner_blocks = all_columns ? min(n_blocks, info.key_end_first / kBlockN) : 0;
    for (; n >= inner_blocks; --n) attend_block(n, std::false_type{});
    for (; n >= 0; --n) attend_block(n, std::true_type{});
  } else {
    for (; n >= 0; --n) attend_block(n, std::false_type{});
  }
  store_output<T, Shape>(p, info, q_tile, acc, row_max,
                         row_sum<Shape>(row_sum_slots, row_sum_registers));
}

}  // namespace flashattn::cuda::mma
