// The wide-head attention kernel of cuda_f16x3 (head_dim 129 to 1024): exact fp32
// on fp16 tensor cores, as kernel.cuh, for heads too wide for a warp to hold a
// row's output. A block of kD / 128 warps owns 32 query rows and all kD output
// columns; the warps split each key chunk two ways:
//   S = Q·Kᵀ   by keys:    warp w scores keys [16w, 16w + 16) of the chunk over
//                          all kD columns (Q hi/lo from shared memory);
//   P·V        by columns: warp w adds P·V into its output columns [128w, 128w + 128)
//                          over all keys of the chunk (P hi/lo from shared memory),
// so no score is computed twice and each warp's output tile (32 × 128 fp32, 128
// registers a thread) stays in registers. Per chunk the warps meet twice: once to
// share their row maxima (the softmax's running maximum is block-wide), once to
// publish P. Row sums stay per warp, over its own keys, and are added at the end.
// The walk and the score step take the kernel's Variant as kernel.cuh's do: a
// window's chunks from its first, softcap and ALiBi on every chunk.
//
// K and V never pass through a shared tile: wide_split.cuh writes them in mma
// fragment order, each warp's units of a key chunk in one run in the order the
// warp takes them, and each warp streams its units (each read by one warp of the
// block only) through a ring of kSlots 1 KB slots of its own, one cp.async group
// per unit, each lane copying and later reading only its own 16 bytes of hi and
// lo: kSlots − 1 units stay in flight without a register or a barrier spent on
// them.
//
// Accuracy as in kernel.cuh: each mma chain is at most 12 long (4 steps of 16
// columns of S, one 16-key step of P·V) before it is added in fp32 with round to
// nearest; K is unscaled per key, V per unit.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/common/split_f16.cuh"
#include "cuda/common/tile_scheduler.cuh"
#include "core/mask.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cuda/common/combine.h"
#include "cuda/sm80/f16x3/group_split.cuh"
#include "cuda/sm80/f16x3/output_rows.cuh"
#include "cuda/sm80/f16x3/wide_split.cuh"
#include "cuda/sm80/score.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"

namespace flashattn::cuda::f16x3 {

template <int kD_>
struct WideShape {
  static constexpr int kD = kD_;
  static constexpr int kWarps = kD / 128;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 32;            // two m16 slices per warp
  static constexpr int kChunk = 16 * kWarps;    // keys per step of the walk
  static constexpr int kKUnits = kD / 16;       // K units a warp takes per chunk
  static constexpr int kVUnits = 8 * kWarps;    // V units: kChunk / 16 key steps × 8 column pairs
  static constexpr int kUnits = kKUnits + kVUnits;
  static constexpr int kSlots = 8;
  static constexpr int kOTiles = 16;            // n8 output tiles per warp
  using QTile = SmemTile<kBlockM, kD>;
  using PTile = SmemTile<kBlockM, kChunk>;
  static_assert(kD % 128 == 0 && kVUnits <= 64 && kVUnits == kKUnits);  // runs: wide_split.cuh
};

template <typename Shape>
struct alignas(128) WideShared {
  static constexpr int kWarps = Shape::kWarps;
  char q_hi[Shape::QTile::kBytes], q_lo[Shape::QTile::kBytes];
  char p_hi[Shape::PTile::kBytes], p_lo[Shape::PTile::kBytes];
  FragmentUnit ring[kWarps][Shape::kSlots];
  float v_unscale[kWarps][Shape::kVUnits];  // this warp's V units of the current chunk
  float row_part[kWarps][Shape::kBlockM];      // per warp: row maxima, at the end row sums
  float q_unscale[Shape::kBlockM];
  // This (batch, kv head)'s runs of split K and V units (wide_split.cuh) and
  // scales, read from here rather than held in registers.
  const FragmentUnit* units;
  const float *k_unscale, *v_unscale_units;
};

// The warp's units in the order its loops consume them: per chunk n, walked from
// the last to the first, the warp's run (wide_split.cuh, UnitRuns), whose K units
// kk = 0 … kKUnits − 1 score keys [16·(n·kWarps + w), +16) and whose V units
// (key step j, column pair 8w + c), j outer, feed P·V. The source steps one unit
// at a time within a run and back kWarps + 1 runs from a run's end to the next
// chunk's; the ring slot's shared address is held, not recomputed per unit.
template <typename Shape>
struct UnitStream {
  static constexpr int kRun = UnitRuns<Shape::kD>::kRun;
  static_assert(kRun % Shape::kSlots == 0);
  const char* src;  // this lane's 16 bytes of hi in the next unit to fetch
  int left;         // units still to fetch; past the end it counts on below 0
  uint32_t ring;    // shared address of this lane's 16 bytes of hi in the warp's slot 0

  __device__ __forceinline__ UnitStream(WideShared<Shape>& sm, int end, int first) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int last = end > first ? end - 1 : 0;
    src = reinterpret_cast<const char*>(
        &sm.units[UnitRuns<Shape::kD>::run(last, w)].hi[lane]);
    left = end > first ? (end - first) * kRun : 0;
    ring = smem_address(&sm.ring[w][0].hi[lane]);
  }

  // The shared address of slot `fetched % kSlots`: left starts at a multiple of
  // kSlots, so the units fetched so far are −left modulo kSlots.
  __device__ __forceinline__ uint32_t slot(int fetched) const {
    return ring + uint32_t(fetched) % Shape::kSlots * uint32_t(sizeof(FragmentUnit));
  }

  __device__ __forceinline__ void fetch() {
    if (left > 0) {
      const uint32_t dst = slot(-left);
      cp_async_16_whole(dst, src);
      cp_async_16_whole(dst + offsetof(FragmentUnit, lo), src + offsetof(FragmentUnit, lo));
      src += sizeof(FragmentUnit);
      if ((left - 1) % kRun == 0) src -= (Shape::kWarps + 1) * kRun * sizeof(FragmentUnit);
    }
    --left;
    cp_async_commit();  // empty past the end, which keeps the group count
  }

  // The next unit's hi and lo registers (kSlots − 1 behind the next fetch);
  // fetches the unit kSlots − 1 further on.
  __device__ __forceinline__ void next(uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    cp_async_wait<Shape::kSlots - 2>();
    const uint32_t at = slot(-left + 1);
    const uint4 h = lds128(at), l = lds128(at + offsetof(FragmentUnit, lo));
    hi[0] = h.x, hi[1] = h.y, hi[2] = h.z, hi[3] = h.w;
    lo[0] = l.x, lo[1] = l.y, lo[2] = l.z, lo[3] = l.w;
    fetch();
  }
};

// chain[mt] += A·B for both m16 slices and a pair of n8 tiles, as three fp16
// products of the split operands: hi·hi, hi·lo, lo·hi (common/split_f16.cuh).
// Each product goes over both slices before the next, so that dependent mma
// are four apart.
__device__ __forceinline__ void mma_split3(float (&chain)[2][2][4], const uint32_t (&a_hi)[2][4],
                                           const uint32_t (&a_lo)[2][4], const uint32_t (&b_hi)[4],
                                           const uint32_t (&b_lo)[4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) mma_two_tiles<__half>(chain[mt][0], chain[mt][1], a_hi[mt], b_hi);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) mma_two_tiles<__half>(chain[mt][0], chain[mt][1], a_hi[mt], b_lo);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) mma_two_tiles<__half>(chain[mt][0], chain[mt][1], a_lo[mt], b_hi);
}

// Splits the tile's Q rows into the hi/lo tiles, one scale per row: warp w takes
// rows w, w + kWarps, …; rows past seqlen_q and columns past head_dim are zeros.
// All of a warp's rows are loaded before any is split (32 float4 a lane at every
// head dim), so that their loads wait once, not once a row.
template <typename Shape>
__device__ __forceinline__ void split_q_rows(const AttnParams& p, const float* q, int rows,
                                             bool vec4, WideShared<Shape>& sm) {
  constexpr int kVecs = Shape::kD / 128;  // float4 per lane and row
  constexpr int kRows = Shape::kBlockM / Shape::kWarps;
  const int lane = thread_index() % 32, w = thread_index() / 32;
  const int head_dim = p.sizes.head_dim;
  float4 x[kRows][kVecs];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = w + Shape::kWarps * i;
    const float* row = q + int64_t(r) * p.q.row_stride;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int col = 4 * (lane + 32 * v);
      x[i][v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < rows && col < head_dim) {
        if (vec4) {
          x[i][v] = *reinterpret_cast<const float4*>(row + col);
        } else {
          x[i][v].x = row[col];
          if (col + 1 < head_dim) x[i][v].y = row[col + 1];
          if (col + 2 < head_dim) x[i][v].z = row[col + 2];
          if (col + 3 < head_dim) x[i][v].w = row[col + 3];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = w + Shape::kWarps * i;
    float mx = 0.0f;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) mx = fmaxf(mx, max_abs(x[i][v]));
    const int e = split_exponent(lanes_max<31u>(mx));
    if (lane == 0) sm.q_unscale[r] = exp2_int(-e);
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int c4 = lane + 32 * v;  // float4 column: 16-byte chunk c4 / 2, half c4 % 2
      store_split4(sm.q_hi, sm.q_lo, Shape::QTile::offset(r, c4 / 2) + 8 * (c4 % 2), x[i][v],
                   exp2_int(e));
    }
  }
}

template <class Variant, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    wide_attention_kernel(const AttnParams p, const TileDivisors tiles, bool vec4,
                          const WideSplitKV kv, const KeySplit split) {
  constexpr int kWarps = Shape::kWarps, kBlockM = Shape::kBlockM, kChunk = Shape::kChunk;
  constexpr int kOT = Shape::kOTiles;
  using QTile = typename Shape::QTile;
  using PTile = typename Shape::PTile;
  extern __shared__ float4 smem[];
  WideShared<Shape>& sm = *reinterpret_cast<WideShared<Shape>*>(smem);
  const Sizes& s = p.sizes;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;

  const TileCoord tc = tile_coord(tiles);
  const int row0 = tc.m_block * kBlockM, rows = min(kBlockM, s.seqlen_q - row0);
  const KeyBlocks blocks = dense_mask(p).key_blocks(row0, rows, kChunk);
  const auto [first, end] = split_key_blocks<Variant::kLowerEnds>(blocks, split.count);

  if (threadIdx.x == 0) {
    const int64_t bh = int64_t(tc.b) * s.heads_kv + tc.hk, steps = kv.rows / 16;
    sm.units = kv.units + UnitRuns<Shape::kD>::head_units(bh, steps);
    sm.k_unscale = kv.k_unscale + bh * kv.rows;
    sm.v_unscale_units = kv.v_unscale + UnitRuns<Shape::kD>::head_scales(bh, steps);
  }
  __syncthreads();
  UnitStream<Shape> stream(sm, end, first);
  if (end > first) {
    const float* q = static_cast<const float*>(p.q.data) + tc.b * p.q.batch_stride +
                     tc.hq * p.q.head_stride + int64_t(row0) * p.q.row_stride;
    split_q_rows<Shape>(p, q, rows, vec4, sm);
  }
  // Launched while the split kernel (wide_split.cuh) may still run: its K and V
  // are read, and any output written, only from here on.
  wait_for_previous_grid();
  if (end > first) {
#pragma unroll
    for (int i = 0; i < Shape::kSlots - 1; ++i) stream.fetch();
    __syncthreads();
  }

  float acc[2][kOT][4] = {};
  float row_max[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float row_sum[2][2] = {};  // over this warp's keys
  const float c = p.softmax.scale_log2;
  const auto score = Variant::score(p.scores, p.softmax.scale, tc.b, tc.hq, dense_mask(p).alignment);

  for (int n = end - 1; n >= first; --n) {
    // S for keys [key0, key0 + 16) over all kD columns, in chains of 4 steps.
    const int key0 = n * kChunk + 16 * w;
    // Scales this chunk needs, loaded now and used after its products: the keys'
    // (S) and this warp's V units' (P·V, staged in shared memory for the warp).
    float2 k_unscale[2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
      k_unscale[nt] = *reinterpret_cast<const float2*>(sm.k_unscale + key0 + 8 * nt + 2 * t);
    constexpr int kScalesPerLane = (Shape::kVUnits + 31) / 32;
    float v_unscale[kScalesPerLane];
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i) {
      const int unit = lane + 32 * i;  // key step unit / 8, column pair 8w + unit % 8
      if (unit < Shape::kVUnits)
        v_unscale[i] = sm.v_unscale_units[UnitRuns<Shape::kD>::run_scales(n, w) + unit];
    }
    float sc[2][2][4] = {};
    {
      const auto q_lane = QTile::lane(smem_address(sm.q_hi), lane % 16, lane / 16);
      for (int kk0 = 0; kk0 < Shape::kKUnits; kk0 += 4) {
        float chain[2][2][4] = {};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t a_hi[2][4], a_lo[2][4], b_hi[4], b_lo[4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            ldmatrix_x4(a_hi[mt], QTile::address(q_lane, 16 * mt, kk0 + i));
            ldmatrix_x4(a_lo[mt], QTile::address(q_lane, 16 * mt, kk0 + i) + QTile::kBytes);
          }
          stream.next(b_hi, b_lo);
          mma_split3(chain, a_hi, a_lo, b_hi, b_lo);
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[mt][nt][e] += chain[mt][nt][e];
      }
    }
    // Unscale (query row · key), mask, and the warp's row maxima over its keys.
    // The warp's V scales for this chunk replace the last chunk's, which all its
    // lanes read in that chunk's P·V: no barrier lies between, so the lanes wait
    // for each other here (compute-sanitizer's racecheck flags it otherwise).
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kScalesPerLane; ++i)
      if (lane + 32 * i < Shape::kVUnits) sm.v_unscale[w][lane + 32 * i] = v_unscale[i];
    float mx[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sc[mt][nt][e] *= sm.q_unscale[16 * mt + g + 8 * (e / 2)] *
                           (e % 2 ? k_unscale[nt].y : k_unscale[nt].x);
    if (!Variant::Score::kIdentity || blocks.needs_mask<Variant::kLowerEnds>(n))
      sm80::score_step<Variant>(dense_mask(p), blocks, n, row0, key0, sc, score);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m = fmaxf(fmaxf(sc[mt][0][2 * h], sc[mt][0][2 * h + 1]),
                        fmaxf(sc[mt][1][2 * h], sc[mt][1][2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        mx[mt][h] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        if (t == 0) sm.row_part[w][16 * mt + g + 8 * h] = mx[mt][h];
      }
    __syncthreads();  // every warp's maxima are in; every warp is done with the last P

    // Dropout (core/dropout.h): bit 4·nt + e of kept[mt] says whether element e
    // of column nt of slice mt is kept; a dropped probability is summed into l
    // but leaves P·V.
    uint32_t kept[2] = {~0u, ~0u};
    if constexpr (Variant::kDropout) {
      if (p.dropout.on()) {
        const DropoutRows dropout = dropout_rows(p.dropout, tc.b, s.heads_q, tc.hq);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          for_each_kept<1>(dropout, row0 + 16 * mt + g, key0 + 2 * t, [&](int nt, int e, bool keep) {
            if (!keep) kept[mt] &= ~(1u << (4 * nt + e));
          });
      }
    }
    // The block-wide running maximum (the same in every warp), the rescale, and
    // P = 2^(s·c − m·c + bias) split into the P tiles at this warp's keys.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + g + 8 * h;
        float m = row_max[mt][h];
#pragma unroll
        for (int v = 0; v < kWarps; ++v) m = fmaxf(m, sm.row_part[v][r]);
        const float m_c = exponent_max(m) * c;
        const float alpha = fast_exp2(row_max[mt][h] * c - m_c);
        row_max[mt][h] = m;
        row_sum[mt][h] *= alpha;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot)
          acc[mt][ot][2 * h] *= alpha, acc[mt][ot][2 * h + 1] *= alpha;
        const float bias_minus_mc = kPLog2Bias - m_c;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          float p0 = fast_exp2(fmaf(sc[mt][nt][2 * h], c, bias_minus_mc));
          float p1 = fast_exp2(fmaf(sc[mt][nt][2 * h + 1], c, bias_minus_mc));
          row_sum[mt][h] += p0 + p1;
          if constexpr (Variant::kDropout) {
            p0 = (kept[mt] >> (4 * nt + 2 * h)) & 1 ? p0 : 0.0f;
            p1 = (kept[mt] >> (4 * nt + 2 * h + 1)) & 1 ? p1 : 0.0f;
          }
          const HalfPairs split_p = split_pair(p0, p1);
          const uint32_t at = PTile::offset(r, 2 * w + nt) + 4 * t;
          *reinterpret_cast<uint32_t*>(sm.p_hi + at) = split_p.hi;
          *reinterpret_cast<uint32_t*>(sm.p_lo + at) = split_p.lo;
        }
      }
    __syncthreads();  // P is complete

    // acc(columns [128w, 128w + 128)) += P·V over the chunk's keys.
    const auto p_lane = PTile::lane(smem_address(sm.p_hi), lane % 16, lane / 16);
    for (int j = 0; j < kWarps; ++j) {
      uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        ldmatrix_x4(a_hi[mt], PTile::address(p_lane, 16 * mt, j));
        ldmatrix_x4(a_lo[mt], PTile::address(p_lane, 16 * mt, j) + PTile::kBytes);
      }
#pragma unroll
      for (int cp = 0; cp < 8; ++cp) {
        uint32_t b_hi[4], b_lo[4];
        stream.next(b_hi, b_lo);
        float chain[2][2][4] = {};
        mma_split3(chain, a_hi, a_lo, b_hi, b_lo);
        const float unscale = sm.v_unscale[w][8 * j + cp];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int o = 0; o < 2; ++o)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[mt][2 * cp + o][e] = fmaf(chain[mt][o][e], unscale, acc[mt][2 * cp + o][e]);
      }
    }
  }
  cp_async_wait<0>();

  // Row sums over all warps' keys (row_part is free: its last reads preceded
  // the last chunk's second barrier).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = sm80::quad_sum(row_sum[mt][h]);
      if (t == 0) sm.row_part[w][16 * mt + g + 8 * h] = l;
    }
  __syncthreads();

  // One split writes p's output itself; several write their parts for the merge.
  const OutputRows out(p, split, tc);
  const RowMask& mask = dense_mask(p);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * mt + g + 8 * h, row = row0 + r;
      if (row >= s.seqlen_q) continue;
      float l = 0.0f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) l += sm.row_part[v][r];
      const bool empty = finished_empty<Variant::Score::kBias>(
          !mask.sees_keys_in(row, first * kChunk, end * kChunk), l);
      out.store(row, h, 128 * w, acc[mt], l, row_max[mt][h], empty, w == 0 && t == 0);
    }
}

}  // namespace flashattn::cuda::f16x3
