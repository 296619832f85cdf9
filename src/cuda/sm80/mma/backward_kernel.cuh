// The 16-bit attention backward on tensor cores (mma.sync m16n8k16, fp32
// accumulation), FlashAttention-2's schedule, for sm_80 and later.
//
// A block owns the kBlockN keys of key tile n of one (batch, kv head): K and V
// stay in shared memory, dK and dV in fp32 registers, while it walks, for each
// query head of the kv head's GQA group, the query tiles that see its keys
// (RowMask::rows_seeing; under a causal mask those at and below the diagonal).
// So dK and dV of a kv head sum over its group inside the block. Per query tile,
// with c = scale·log2(e) and lse2 = lse·log2(e):
//   S = Q·Kᵀ, dP = dO·Vᵀ                        (registers)
//   P = 2^(S·c − lse2), dS = P∘(dP − D)          (registers, then 16-bit in shared memory)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                     (registers)
//   dQ += dS·K                                   (fp32 in global memory, by atomic adds)
// P comes from the forward's lse, never from a running max, so it needs no
// score to be −inf: a key the row does not see, a row past seqlen_q and every
// key of a row without keys (whose lse is −inf) get P = dS = 0 by a select,
// right for any scale, a scale <= 0 included. Only tiles that the mask or the
// ragged ends cut pay for it. A score variant (the Variant template parameter,
// core/variant.h) changes S before P and multiplies dS by its derivative. dK takes `scale` at the end; dQ takes it where
// dq_output.cu turns the fp32 sums into the output. Dropout (core/dropout.h):
// the tile's keep decisions, regenerated, scale dP (dS = P∘(Z∘dP − D)) and
// zero the dropped P of dV's product; dV takes the keep scale at the end.
//
// Query tile loads (Q, dO, lse, D) are double-buffered where shared memory
// holds two of each: tile i + 1 is loaded by cp.async while tile i is computed.
// At d = 512 it holds one (Shape::kQStages): then the products run in the order
// dP, S, dV, dK, dQ, dO's next tile loads as soon as dV is done (during dK, dQ
// and the adds) and Q's as soon as dK is (during dQ, the adds and the next dP).
//
// Deterministic mode: the dQ adds of a query tile are made in key-tile order,
// from the last key tile that sees it down. turns[(b·heads_q + hq)·query_tiles
// + m] counts the key tiles that have added into that tile; each warp of key
// tile n waits for the tiles above n (dq_adds_before) just before its adds, and
// thread 0 counts the block after the barrier that follows them (its fence is
// cumulative over what the barrier ordered before it, so the other threads need
// no fence of their own, and their adds drain during dV and dK). Those tiles
// come earlier in the grid (common/backward_walk.cuh's order in this mode), so
// the wait ends.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "core/params.h"
#include "cuda/common/backward_walk.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/dq_accum.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/common/opaque.cuh"
#include "cuda/sm80/mma/backward_shape.cuh"
#include "cuda/sm80/operands.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::mma {

// Starts loading query tile `tile`'s Q rows into `stage` (no commit).
template <typename Shape>
__device__ __forceinline__ void load_q_rows(const BwdParams& p, const BackwardWalk& w,
                                            const Sequence& seq, char* smem, QueryTile tile,
                                            int stage, bool vec16) {
  using QTile = typename Shape::QTile;
  const int row0 = tile.m * Shape::kBlockM;
  const auto* q = static_cast<const uint16_t*>(p.q.data) + row_offset(p.q, w.b, seq.q_row0 + row0) +
                  tile.hq * p.q.head_stride;
  load_tile<QTile, Shape::kThreads>(smem + Shape::kQOffset + stage * QTile::kBytes, q,
                                    p.q.row_stride, seq.seqlen_q - row0, p.sizes.head_dim, vec16);
}

// Starts loading query tile `tile`'s lse and D into `stage` (no commit).
template <typename Shape>
__device__ __forceinline__ void load_row_stats(const BwdParams& p, const BackwardWalk& w,
                                               const Sequence& seq, char* smem, QueryTile tile,
                                               int stage) {
  const int row0 = tile.m * Shape::kBlockM, tid = thread_index();
  if (tid < Shape::kBlockM) {
    const int64_t row = stats_row0(p, w.b, tile.hq, seq) + row0 + tid;
    const bool exists = row0 + tid < seq.seqlen_q;
    auto* lse = reinterpret_cast<float*>(smem + Shape::kLseOffset) + stage * Shape::kBlockM;
    auto* dot = reinterpret_cast<float*>(smem + Shape::kRowDotOffset) + stage * Shape::kBlockM;
    cp_async_4(lse + tid, exists ? p.grad.lse + row : p.grad.lse, exists);
    cp_async_4(dot + tid, exists ? p.grad.row_dot + row : p.grad.row_dot, exists);
  }
}

// Starts loading query tile `tile`'s dO rows into `stage` (no commit).
template <typename Shape>
__device__ __forceinline__ void load_dout_rows(const BwdParams& p, const BackwardWalk& w,
                                               const Sequence& seq, char* smem, QueryTile tile,
                                               int stage, bool vec16) {
  using QTile = typename Shape::QTile;
  const int row0 = tile.m * Shape::kBlockM;
  const auto* dout = static_cast<const uint16_t*>(p.grad.dout.data) +
                     row_offset(p.grad.dout, w.b, seq.q_row0 + row0) +
                     tile.hq * p.grad.dout.head_stride;
  load_tile<QTile, Shape::kThreads>(smem + Shape::kDOutOffset + stage * QTile::kBytes, dout,
                                    p.grad.dout.row_stride, seq.seqlen_q - row0,
                                    p.sizes.head_dim_v, vec16);
}

template <typename T, typename Shape, class Variant>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    backward_kernel(const BwdParams p, int query_tiles, float* dq_accum, DqLayout dq_layout,
                    int* turns, int turn_group, bool vec16) {
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  using PTile = typename Shape::PTile;
  using sm80::AStoredKM;
  using sm80::AStoredMK;
  using sm80::BStoredKN;
  using sm80::BStoredNK;
  using sm80::warp_mma;
  constexpr int kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN, kD = Shape::kD;
  constexpr int kSMT = Shape::kSMTiles, kSNT = Shape::kSNTiles;
  constexpr int kKVMT = Shape::kKVMTiles, kKVNT = Shape::kKVNTiles;
  constexpr int kQMT = Shape::kQMTiles, kQNT = Shape::kQNTiles;

  extern __shared__ __align__(128) char smem[];
  char* const k_tile = smem + Shape::kKOffset;
  char* const v_tile = smem + Shape::kVOffset;
  const Sizes& s = p.sizes;
  const BackwardWalk w =
      backward_walk<Shape::kBlockM, Shape::kBlockN>(p, query_tiles, turn_group, false);
  // The block's sequence and its mask, kept in shared memory: the loop re-reads
  // them at the cost of a shared load, not registers.
  __shared__ Sequence seq;
  __shared__ RowMask mask;
  if (thread_index() == 0) {
    seq = sequence(p, w.b);
    mask = row_mask(p, seq);
  }
  __syncthreads();

  const int warp = thread_index() / 32, lane = thread_index() % 32, g = lane / 4, t = lane % 4;
  const int s_row0 = warp / Shape::kSWarpsN * Shape::kSRows;
  const int s_col0 = warp % Shape::kSWarpsN * Shape::kSCols;
  const int kv_row0 = warp / Shape::kKVWarpsD * Shape::kKVRows;
  const int kv_col0 = warp % Shape::kKVWarpsD * Shape::kKVCols;
  const int q_row0 = warp / Shape::kQWarpsD * Shape::kQRows;
  const int q_col0 = warp % Shape::kQWarpsD * Shape::kQCols * Shape::kQPasses;

  auto turn = [&](QueryTile tile) {
    return turns + (int64_t(w.b) * s.heads_q + tile.hq) * query_tiles + tile.m;
  };
  auto pass_turn = [&](QueryTile tile) {  // thread 0, after a barrier that follows the adds
    __threadfence();
    atomicAdd(turn(tile), 1);
  };
  QueryTile tile = w.first();
  // One stage: K, V and dO in the first group, Q, lse and D in the second, so
  // that dP can start before Q has landed.
  constexpr bool kOneStage = Shape::kQStages == 1;
  if (w.steps > 0) {
    const auto* k = static_cast<const uint16_t*>(p.k.data) +
                    row_offset(p.k, w.b, seq.k_row0 + w.key0) + w.hk * p.k.head_stride;
    const auto* v = static_cast<const uint16_t*>(p.v.data) +
                    row_offset(p.v, w.b, seq.k_row0 + w.key0) + w.hk * p.v.head_stride;
    load_tile<KTile, Shape::kThreads>(k_tile, k, p.k.row_stride, w.keys, s.head_dim, vec16);
    load_tile<KTile, Shape::kThreads>(v_tile, v, p.v.row_stride, w.keys, s.head_dim_v, vec16);
    if constexpr (kOneStage) {
      load_dout_rows<Shape>(p, w, seq, smem, tile, 0, vec16);
      cp_async_commit();
      load_q_rows<Shape>(p, w, seq, smem, tile, 0, vec16);
      load_row_stats<Shape>(p, w, seq, smem, tile, 0);
    } else {
      load_q_rows<Shape>(p, w, seq, smem, tile, 0, vec16);
      load_dout_rows<Shape>(p, w, seq, smem, tile, 0, vec16);
      load_row_stats<Shape>(p, w, seq, smem, tile, 0);
    }
    cp_async_commit();
  }

  float dv[kKVMT][kKVNT][4] = {};
  float dk[kKVMT][kKVNT][4] = {};
  QueryTile last = tile;
  for (int step = 0; step < w.steps; ++step, last = tile, tile = tile.next(w)) {
    if constexpr (kOneStage) cp_async_wait<1>();  // dO (and at first K and V)
    else cp_async_wait<0>();
    __syncthreads();  // this step's tiles have landed; every warp is done with the last step's
    if (turns && step > 0 && thread_index() == 0) pass_turn(last);
    if (!kOneStage && step + 1 < w.steps) {
      load_q_rows<Shape>(p, w, seq, smem, tile.next(w), (step + 1) % 2, vec16);
      load_dout_rows<Shape>(p, w, seq, smem, tile.next(w), (step + 1) % 2, vec16);
      load_row_stats<Shape>(p, w, seq, smem, tile.next(w), (step + 1) % 2);
      cp_async_commit();
    }

    const int stage = step % Shape::kQStages, hq = tile.hq, row0 = tile.m * kBlockM;
    const uint32_t q_tile = smem_address(smem + Shape::kQOffset + stage * QTile::kBytes);
    const uint32_t dout_tile = smem_address(smem + Shape::kDOutOffset + stage * QTile::kBytes);
    char* const p_tile = smem + Shape::kPOffset;
    char* const ds_tile = smem + Shape::kDSOffset;

    float sc[kSMT][kSNT][4] = {};
    float dp[kSMT][kSNT][4] = {};
    if constexpr (!kOneStage)
      warp_mma<T, kD / 16>(sc, AStoredMK<QTile>(q_tile, s_row0, lane),
                           BStoredNK<KTile>(smem_address(k_tile), s_col0, lane));
    warp_mma<T, kD / 16>(dp, AStoredMK<QTile>(dout_tile, s_row0, lane),
                         BStoredNK<KTile>(smem_address(v_tile), s_col0, lane));
    if constexpr (kOneStage) {
      cp_async_wait<0>();
      __syncthreads();  // Q, lse and D have landed
      warp_mma<T, kD / 16>(sc, AStoredMK<QTile>(q_tile, s_row0, lane),
                           BStoredNK<KTile>(smem_address(k_tile), s_col0, lane));
    }
    // P and dS in place of S and dP. `whole`: every row exists and sees every key.
    const bool whole = row0 + kBlockM <= seq.seqlen_q && mask.key_end(row0) >= w.key0 + kBlockN &&
                       (!Variant::kLowerEnds || mask.key_begin(row0 + kBlockM - 1) <= w.key0);
    const auto score = Variant::score(p.scores, p.softmax.scale, w.b, hq, mask.alignment);
    using Score = decltype(score);
    const float* lse = reinterpret_cast<const float*>(smem + Shape::kLseOffset) + stage * kBlockM;
    const float* row_dot =
        reinterpret_cast<const float*>(smem + Shape::kRowDotOffset) + stage * kBlockM;
    // Dropout: bit 4·nt + e of kept[mt] says whether element e of column nt of
    // slice mt is kept; dP takes Z (keep scale or 0) here.
    using KeptBits = std::conditional_t<(4 * kSNT > 32), uint64_t, uint32_t>;
    KeptBits kept[kSMT];
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt) kept[mt] = ~KeptBits(0);
    if constexpr (Variant::kDropout) {
      if (p.dropout.on()) {
        const DropoutRows dropout = dropout_rows(p.dropout, w.b, s.heads_q, hq);
        const float keep_scale = p.dropout.keep_scale;
#pragma unroll
        for (int mt = 0; mt < kSMT; ++mt)
          for_each_kept<kSNT / 2>(dropout, row0 + s_row0 + 16 * mt + g, w.key0 + s_col0 + 2 * t,
                                  [&](int nt, int e, bool keep) {
                                    float& y = dp[mt][nt][e];
                                    y = keep ? y * keep_scale : 0.0f;
                                    if (!keep) kept[mt] &= ~(KeptBits(1) << (4 * nt + e));
                                  });
      }
    }
    // bias: the bias's reader for its element type (Score::kBias), else
    // NoBiasReader; only visible keys' elements are read.
    const auto probabilities = [&](const auto& bias) {
#pragma unroll
      for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = s_row0 + 16 * mt + g + 8 * h;
          const float neg_lse2 = -backward_lse2(lse[r]), d = row_dot[r];
          // Keys of the tile this row sees: columns [unseen, seen), counted from this thread's first.
          const int col0 = w.key0 + s_col0 + 2 * t;
          const int seen = row0 + r < seq.seqlen_q ? mask.key_end(row0 + r) - col0 : 0;
          const int unseen = Variant::kLowerEnds ? mask.key_begin(row0 + r) - col0 : 0;
          float distance0 = 0.0f;  // ALiBi's, of column 0, stepped by constants
          if constexpr (!Score::kIdentity) distance0 = score.distance(row0 + r, col0);
          const auto* bias_row = bias.row_at(row0 + r);
#pragma unroll
          for (int nt = 0; nt < kSNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = sc[mt][nt][2 * h + e];
              float& y = dp[mt][nt][2 * h + e];
              const bool visible =
                  whole || (8 * nt + e < seen && (!Variant::kLowerEnds || 8 * nt + e >= unseen));
              float dscore = 1.0f;
              if constexpr (!Score::kIdentity) x = score.at(x, distance0 - float(8 * nt + e), dscore);
              if constexpr (Score::kBias) {
                if (visible) x += bias.at(bias_row, col0 + 8 * nt + e);
              }
              const float prob = fast_exp2(fmaf(x, p.softmax.scale_log2, neg_lse2));
              if constexpr (Variant::kDropout)
                x = visible && ((kept[mt] >> (4 * nt + 2 * h + e)) & 1) ? prob : 0.0f;
              else
                x = visible ? prob : 0.0f;
              if constexpr (Score::kIdentity) y = visible ? prob * (y - d) : 0.0f;
              else y = visible ? prob * (y - d) * dscore : 0.0f;
            }
        }
    };
    if constexpr (Score::kBias) score.bias.read(probabilities);
    else probabilities(NoBiasReader{});
#pragma unroll
    for (int mt = 0; mt < kSMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = s_row0 + 16 * mt + g + 8 * h;
#pragma unroll
        for (int nt = 0; nt < kSNT; ++nt) {
          const uint32_t offset = PTile::offset(r, (s_col0 + 8 * nt) / 8) + 4 * t;
          *reinterpret_cast<uint32_t*>(p_tile + offset) =
              pack_pair<T>(sc[mt][nt][2 * h], sc[mt][nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(ds_tile + offset) =
              pack_pair<T>(dp[mt][nt][2 * h], dp[mt][nt][2 * h + 1]);
        }
      }
    __syncthreads();  // P and dS are in shared memory

    // dQ = dS·K, added into the fp32 sums.
    const auto add_dq = [&] {
      float* dq_head = dq_accum + dq_layout.base(w.b, hq, seq.q_row0);
#pragma unroll
      for (int pass = 0; pass < Shape::kQPasses; ++pass) {
        const int col0 = q_col0 + pass * Shape::kQCols;
        // Columns that are all padding: no product, and no adds, which cost the
        // L2 bandwidth that bounds d = 512. (In deterministic mode such a warp
        // has nothing to wait for.)
        if (Shape::kSkipsPadding && col0 >= s.head_dim) continue;
        float dq[kQMT][kQNT][4] = {};
        warp_mma<T, kBlockN / 16>(dq, AStoredMK<PTile>(smem_address(ds_tile), q_row0, lane),
                                  BStoredKN<KTile>(smem_address(k_tile), col0, lane));
        // Deterministic mode: each warp waits for its turn only here, after its
        // product; the wait once stood before the block's barrier above.
        if (turns && pass == 0) {
          const int before = dq_adds_before<kBlockM, kBlockN>(mask, row0, w);
          if (lane == 0)
            while (load_acquire(turn(tile)) != before) {
            }
          __syncwarp();
        }
#pragma unroll
        for (int mt = 0; mt < kQMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kQNT; ++nt)
            add_four(
                dq_head + dq_tile_offset(row0 + q_row0 + 16 * mt, col0 + 8 * nt, kD) + 4 * lane,
                dq[mt][nt]);
      }
    };
    if constexpr (kOneStage) {
      // dV, then dO's next tile loads during dK and dQ; dK, then Q's during dQ
      // and the next step's dP.
      if (!Shape::kSkipsPadding || kv_col0 < s.head_dim_v)  // else dV's columns are all padding
        warp_mma<T, kBlockM / 16>(dv, AStoredKM<PTile>(smem_address(p_tile), kv_row0, lane),
                                  BStoredKN<QTile>(dout_tile, kv_col0, lane));
      __syncthreads();  // every warp is done with dO
      if (step + 1 < w.steps) {
        load_dout_rows<Shape>(p, w, seq, smem, tile.next(w), 0, vec16);
        cp_async_commit();
      }
      if (!Shape::kSkipsPadding || kv_col0 < s.head_dim)
        warp_mma<T, kBlockM / 16>(dk, AStoredKM<PTile>(smem_address(ds_tile), kv_row0, lane),
                                  BStoredKN<QTile>(q_tile, kv_col0, lane));
      __syncthreads();  // every warp is done with Q, lse and D
      if (step + 1 < w.steps) {
        load_q_rows<Shape>(p, w, seq, smem, tile.next(w), 0, vec16);
        load_row_stats<Shape>(p, w, seq, smem, tile.next(w), 0);
        cp_async_commit();
      }
      add_dq();
    } else {
      // dQ first: its adds then drain while the tensor cores work on dV and dK
      // (+4% at d = 128, +12% at d = 64 over adding after them, v4).
      add_dq();
      warp_mma<T, kBlockM / 16>(dv, AStoredKM<PTile>(smem_address(p_tile), kv_row0, lane),
                                BStoredKN<QTile>(dout_tile, kv_col0, lane));
      warp_mma<T, kBlockM / 16>(dk, AStoredKM<PTile>(smem_address(ds_tile), kv_row0, lane),
                                BStoredKN<QTile>(q_tile, kv_col0, lane));
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with K and V, and has made its dQ adds
  if (turns && w.steps > 0 && thread_index() == 0) pass_turn(last);

  // dV and scale·dK through the V and K tiles, then out as 16-byte rows.
#pragma unroll
  for (int mt = 0; mt < kKVMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kKVNT; ++nt) {
        const uint32_t offset =
            KTile::offset(kv_row0 + 16 * mt + g + 8 * h, (kv_col0 + 8 * nt) / 8) + 4 * t;
        const float dv_scale = Variant::kDropout ? p.dropout.keep_scale : 1.0f;
        *reinterpret_cast<uint32_t*>(v_tile + offset) =
            pack_pair<T>(dv[mt][nt][2 * h] * dv_scale, dv[mt][nt][2 * h + 1] * dv_scale);
        *reinterpret_cast<uint32_t*>(k_tile + offset) = pack_pair<T>(
            dk[mt][nt][2 * h] * p.softmax.scale, dk[mt][nt][2 * h + 1] * p.softmax.scale);
      }
  __syncthreads();
  const GradParams& grad = p.grad;
  store_tile<KTile, Shape::kThreads>(
      k_tile,
      static_cast<uint16_t*>(grad.dk.data) + row_offset(grad.dk, w.b, seq.k_row0 + w.key0) +
          w.hk * grad.dk.head_stride,
      grad.dk.row_stride, w.keys, s.head_dim, vec16);
  store_tile<KTile, Shape::kThreads>(
      v_tile,
      static_cast<uint16_t*>(grad.dv.data) + row_offset(grad.dv, w.b, seq.k_row0 + w.key0) +
          w.hk * grad.dv.head_stride,
      grad.dv.row_stride, w.keys, s.head_dim_v, vec16);
}

}  // namespace flashattn::cuda::mma
