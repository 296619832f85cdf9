// The 16-bit attention backward for Hopper (sm_90a): TMA loads into
// mbarrier-guarded stages, wgmma products, warp specialisation.
//
// A block owns the kBlockN keys of key tile n of one (batch, kv head) and
// walks, as cuda_mma's backward does (common/backward_walk.cuh), every query
// head of the GQA group and the query tiles that see its keys; dK and dV of the
// kv head sum over the group in registers. K and V are loaded once and stay in
// shared memory. Warp 0 of warpgroup 0 is the producer: per query tile, into
// one of kQStages stages, Q and dO by TMA, lse·log2(e) and D by its lanes. The other
// two warpgroups are consumers, which split the block's work by keys or by
// columns (backward_traits.h). Per query tile, with c = scale·log2(e) and
// lse2 = lse·log2(e), a consumer computes, transposed so that its keys are the
// rows (wgmma's M):
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                            (wgmma, shared × shared)
//   Pᵀ = 2^(Sᵀ·c − lse2), dSᵀ = Pᵀ∘(dPᵀ − D)           (registers)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                            (wgmma, registers × shared)
//   dQ += dS·K                                          (wgmma on dSᵀ in shared memory,
//                                                        a bulk reduction into fp32 sums)
// The accumulator layout of Pᵀ and dSᵀ, packed to 16 bits, is wgmma's A
// fragment, so dV and dK take them from registers (split by columns, the other
// consumer's query rows from shared memory); dQ needs dS with query rows as M,
// so dSᵀ goes through shared memory and dQ reads it transposed (MN-major).
// Each consumer computes half of a step's dQ (Tr::kDQCols), once both halves of
// dSᵀ are written, into a dQ buffer in shared memory (or the step's stage,
// Tr::kDQInStage); warp 1 of warpgroup 0, the dQ warp, adds the buffer to the
// fp32 sums of cuda_mma (common/dq_accum.cuh) by one bulk reduction, and
// write_dq finishes them. So the consumers do the same products a step, and
// the reduction (and in deterministic mode the wait for its turn) is off their
// path. As in cuda_mma, P comes from lse, and a select zeroes P and dS of
// every key a row does not see, of rows past seqlen_q and of keys past
// seqlen_k, only on the tiles that the mask or the ragged ends cut; dK takes
// `scale` at the end and dQ in write_dq. A score variant (the Variant template
// parameter, core/variant.h) changes Sᵀ before Pᵀ and multiplies dSᵀ by its
// derivative. Dropout (core/dropout.h), regenerated per tile: Z scales dPᵀ
// before dSᵀ is formed, the dropped elements of Pᵀ are zeroed before dV's
// product, and dV takes the keep scale at the end. Deterministic mode: dQ adds
// in key-tile order, as cuda_mma's (turn counters per query tile), counted by
// the dQ warp.
//
// kPacked: a packed batch (core/seqlen.h). The maps cover the tensors' own rows
// (one batch index of the total lengths) and a block's tiles start at its
// sequence's first row and key; the grid holds the longest sequence's key
// tiles for every sequence, and a block past its sequence's keys leaves at
// once. A tile that runs past its sequence's end holds the next sequence's rows
// (or keys): their P and dS are zeroed by the select, but 0·inf and 0·NaN are
// NaN, so the producer's warp zeroes those rows of Q and dO, and the dQ warp
// those of K and V, once they land and before the consumers may read them
// (BackwardBarriers' landed barriers). Where a sequence's keys end inside a
// warpgroup's 64, its dK and dV go out row by row from its threads, since a
// TMA box would write into the next sequence's rows.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "core/params.h"
#include "cuda/common/backward_walk.cuh"
#include "cuda/common/dq_accum.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm90/backward_traits.h"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_ops.cuh"

namespace flashattn::cuda::sm90 {

// What the kernel needs: the problem, and its tensors as TMA descriptors.
struct BackwardKernelParams {
  CUtensorMap q, dout;    // boxes of kBlockM rows
  CUtensorMap k, v;       // boxes of kBlockN rows
  CUtensorMap dk, dv;     // stores, boxes of 64 rows (a consumer's keys)
  BwdParams p;
  int query_tiles;        // per (batch, q head)
  float* dq_accum;        // zeroed fp32 sums, common/dq_accum.cuh's layout
  int* turns;             // deterministic mode's counters, zeroed; else null
  int turn_group;         // deterministic mode's slices side by side (DqSums); else 0
  bool adds_from_first;   // deterministic mode's order (common/backward_walk.cuh)
  DqLayout dq_layout;     // where a (sequence, q head)'s sums start in dq_accum (packed)
  TailSplit tail;         // the grid's split last key tiles (core/tail_split.h)
  float* tail_sums;       // theirs, zeroed: per tile dK's then dV's kBlockN × kHeadDim fp32
  int* tail_counts;       // per split tile, its parts done; zeroed
};

// The block's sequence of a packed batch, kept in shared memory by the first
// thread: where its rows and keys start in the tensors, its lengths, and the
// mask resolved for them. Dense batches read the sizes and the batch's mask
// from the parameters instead.
struct BlockSequence {
  Sequence seq;
  RowMask mask;
};

template <class Tr>
struct BackwardBarriers {
  uint64_t kv_full;
  uint64_t q_full[Tr::kQStages];     // Q (by TMA), lse2 and D (by the stats warps' lanes)
  uint64_t dout_full[Tr::kQStages];  // dO of the stage
  uint64_t q_empty[Tr::kQStages];    // every consumer thread is done with the stage
  // Packed: tiles that run past their sequence's end land here, and kv_full,
  // q_full and dout_full complete once the rows past the end are zeroed (the
  // other steps arrive on q_landed without bytes, so its phases are the steps').
  uint64_t kv_landed;
  uint64_t q_landed[Tr::kQStages];   // Q and dO of the stage
};

// Hardware barriers (0 is __syncthreads). Among the 256 consumer threads:
// kDSReady + b, both halves of dSᵀ buffer b are written; kKVDone, both
// warpgroups are done with K and V; kStored + w, warpgroup w's dK and dV tiles
// are written. Among the consumers and the dQ warp: kDQFull + b, dQ buffer b
// holds a step's dQ; kDQFree + b, its last reduction has read it out. Where dQ
// goes into the stage, b is the stage, and kStageRead (among the consumers) in
// kDQFree's place: both are done reading the stage.
enum BackwardBarrier : int {
  kDSReady = 1,
  kDQFull = 3,
  kDQFree = 5,
  kStageRead = kDQFree,
  kKVDone = 7,
  kStored = 8
};

template <class Tr, bool kPacked>
__device__ __forceinline__ void backward_producer(const BackwardKernelParams& kp,
                                                  const BackwardWalk& w, const BlockSequence* block,
                                                  uint8_t* smem, BackwardBarriers<Tr>& bar) {
  const BwdParams& p = kp.p;
  const Sizes& s = p.sizes;
  const int lane = threadIdx.x % 32;
  // Packed, the maps hold one batch index and the tiles start at the
  // sequence's first row and key.
  const int batch = kPacked ? 0 : w.b;
  const int key_row = kPacked ? int(block->seq.k_row0) + w.key0 : w.key0;
  const int seqlen_q = kPacked ? block->seq.seqlen_q : s.seqlen_q;
  if (lane == 0) {
    // Packed, a key tile past its sequence's keys lands on kv_landed, and the
    // dQ warp zeroes those keys (backward_dq_writer).
    uint64_t* kv_at = kPacked && w.keys < Tr::kBlockN ? &bar.kv_landed : &bar.kv_full;
    expect_bytes(kv_at, Tr::kKVBytes + Tr::kVLoadBytes);
#pragma unroll
    for (int panel = 0; panel < Tr::kPanels; ++panel) {
      tma_load(smem + Tr::kKOffset + panel * Tr::kBlockN * 128, &kp.k, 64 * panel, key_row, w.hk,
               batch, kv_at);
      if (panel < Tr::kPanelsV)
        tma_load(smem + Tr::kVOffset + panel * Tr::kBlockN * 128, &kp.v, 64 * panel, key_row, w.hk,
                 batch, kv_at);
    }
  }
  QueryTile tile = w.first();
  for (int step = 0; step < w.steps; ++step, tile = tile.next(w)) {
    const int stage = step % Tr::kQStages;
    wait_barrier(&bar.q_empty[stage], ((step / Tr::kQStages) & 1) ^ 1);
    const int row0 = tile.m * Tr::kBlockM;
    const int q_row = kPacked ? int(block->seq.q_row0) + row0 : row0;
    uint8_t* q_at = smem + Tr::q_offset(stage);
    uint8_t* dout_at = smem + Tr::dout_offset(stage);
    const auto load_q_dout = [&](uint64_t* q_full, uint64_t* dout_full) {
#pragma unroll
      for (int panel = 0; panel < Tr::kPanels; ++panel) {
        const uint32_t at = panel * Tr::kBlockM * 128;
        tma_load(q_at + at, &kp.q, 64 * panel, q_row, tile.hq, batch, q_full);
        if (panel < Tr::kPanelsV)
          tma_load(dout_at + at, &kp.dout, 64 * panel, q_row, tile.hq, batch, dout_full);
      }
    };
    // Packed, a tile that runs past the sequence's rows.
    const bool rows_past_end = kPacked && row0 + Tr::kBlockM > seqlen_q;
    if (rows_past_end) {
      if (lane == 0) {
        expect_bytes(&bar.q_landed[stage], Tr::kQBytes + Tr::kDOutLoadBytes);
        load_q_dout(&bar.q_landed[stage], &bar.q_landed[stage]);
      }
      // Its rows past the end zeroed once landed; then lane 0's arrival, after
      // the warp's stores, releases them.
      wait_barrier(&bar.q_landed[stage], (step / Tr::kQStages) & 1);
      zero_rows<Tr::kPanels, Tr::kBlockM>(q_at, seqlen_q - row0);
      zero_rows<Tr::kPanelsV, Tr::kBlockM>(dout_at, seqlen_q - row0);
      fence_shared_to_async();
      __syncwarp();
      if (lane == 0) {
        arrive(&bar.q_full[stage]);
        arrive(&bar.dout_full[stage]);
      }
    } else if (lane == 0) {
      expect_bytes(&bar.q_full[stage], Tr::kQBytes);
      expect_bytes(&bar.dout_full[stage], Tr::kDOutLoadBytes);
      load_q_dout(&bar.q_full[stage], &bar.dout_full[stage]);
      // Packed, q_landed completes a phase every step, so that its parity
      // is the step's.
      if constexpr (kPacked) arrive(&bar.q_landed[stage]);
    }
  }
}

// The stats warps (warps 2 and 3 of the producer warpgroup): per step, one of
// the query tile's row statistics into the stage, lse2 (kLse) or D, each lane's
// rows loaded into registers a step ahead, so that their latency passes while
// the warp waits for the stage to free. Warps of their own, one statistic
// each: within the producer's 24 registers, both statistics in the TMA warp's
// lanes spilled at d64 (four rows a lane), and both in one warp of their own
// still did.
template <class Tr, bool kPacked, bool kLse>
__device__ __forceinline__ void backward_stats_loader(const BackwardKernelParams& kp,
                                                      const BackwardWalk& w,
                                                      const BlockSequence* block, uint8_t* smem,
                                                      BackwardBarriers<Tr>& bar) {
  const BwdParams& p = kp.p;
  const Sizes& s = p.sizes;
  const int lane = threadIdx.x % 32;
  const int seqlen_q = kPacked ? block->seq.seqlen_q : s.seqlen_q;
  const float* source = kLse ? p.grad.lse : p.grad.row_dot;
  constexpr int kRowsPerLane = Tr::kBlockM / 32;
  float next[kRowsPerLane];
  const auto load = [&](QueryTile tile) {
    const int row0 = tile.m * Tr::kBlockM;
    const int64_t stats0 = kPacked ? tile.hq * p.seqs.total_q + block->seq.q_row0 + row0
                                   : (int64_t(w.b) * s.heads_q + tile.hq) * s.seqlen_q + row0;
#pragma unroll
    for (int r = 0; r < kRowsPerLane; ++r) {
      const int i = lane + 32 * r;
      const float value = row0 + i < seqlen_q ? source[stats0 + i] : 0.0f;
      next[r] = kLse && row0 + i < seqlen_q ? backward_lse2(value) : value;
    }
  };
  // D is the D pass's, which may still run (the early launch, backward_launch.cuh).
  if constexpr (!kLse) wait_for_previous_grid();
  QueryTile tile = w.first();
  if (w.steps > 0) load(tile);
  for (int step = 0; step < w.steps; ++step, tile = tile.next(w)) {
    const int stage = step % Tr::kQStages;
    wait_barrier(&bar.q_empty[stage], ((step / Tr::kQStages) & 1) ^ 1);
    float* stats = reinterpret_cast<float*>(smem + (kLse ? Tr::kLseOffset : Tr::kRowDotOffset)) +
                   stage * Tr::kBlockM;
#pragma unroll
    for (int r = 0; r < kRowsPerLane; ++r) stats[lane + 32 * r] = next[r];
    // Each lane's stores, then its arrival: the consumers' wait on q_full
    // acquires what every arrival releases.
    arrive(&bar.q_full[stage]);
    if (step + 1 < w.steps) load(tile.next(w));
  }
}

// The dQ warp (warp 1 of the producer warpgroup): per step, once both
// consumers have written their shares into the step's dQ buffer, one bulk
// reduction adds it to the fp32 sums; the buffer is handed back once the
// reduction has read it. In deterministic mode the key tiles of a query tile
// add in order: lane 0 waits for the tile's turn and, once the buffer is handed
// back, counts the turn when its sums are performed. Off the consumers' path,
// so neither the reduction nor the wait for a turn holds their products. Where
// dQ goes into the stage, the read-out frees the stage for the producer.
template <class Tr, bool kPacked>
__device__ __forceinline__ void backward_dq_writer(const BackwardKernelParams& kp,
                                                   const BackwardWalk& w, const BlockSequence* block,
                                                   uint8_t* smem, BackwardBarriers<Tr>& bar) {
  const BwdParams& p = kp.p;
  const Sizes& s = p.sizes;
  const RowMask& mask = kPacked ? block->mask : dense_mask(p);
  const bool issues = threadIdx.x % 32 == 0;
  if (kPacked && w.keys < Tr::kBlockN) {
    // The key tile's rows past its sequence's keys, zeroed once landed: the
    // warp is idle until the first step's dQ.
    wait_barrier(&bar.kv_landed, 0);
    zero_rows<Tr::kPanels, Tr::kBlockN>(smem + Tr::kKOffset, w.keys);
    zero_rows<Tr::kPanelsV, Tr::kBlockN>(smem + Tr::kVOffset, w.keys);
    fence_shared_to_async();
    __syncwarp();
    if (issues) arrive(&bar.kv_full);
  }
  wait_for_previous_grid();  // the sums (and turns) zeroed by the D pass
  QueryTile tile = w.first();
  for (int step = 0; step < w.steps; ++step, tile = tile.next(w)) {
    const int stage = step % Tr::kQStages;
    const int dq_buffer = Tr::dq_buffer(step);
    named_barrier_sync(kDQFull + dq_buffer, Tr::kDQMeeting);
    const int row0 = tile.m * Tr::kBlockM;
    int* turn = kp.turns ? kp.turns + (int64_t(w.b) * s.heads_q + tile.hq) * kp.query_tiles + tile.m
                         : nullptr;
    if (issues) {
      if (turn) {  // the key tiles before this one in the order add first (backward_walk.cuh)
        const int before = dq_adds_before<Tr::kBlockM, Tr::kBlockN>(mask, row0, w);
        while (load_acquire(turn) != before) {
        }
      }
      float* dq_head =
          kPacked ? kp.dq_accum + kp.dq_layout.base(w.b, tile.hq, block->seq.q_row0)
                  : kp.dq_accum + (int64_t(w.b) * s.heads_q + tile.hq) * kp.query_tiles *
                                      Tr::kBlockM * Tr::kDQWidth;
      bulk_reduce_add(dq_head + dq_tile_offset(row0, 0, Tr::kDQWidth), smem + Tr::dq_offset(step),
                      Tr::kDQBytes);
      tma_store_commit();
      tma_store_wait_read();  // the buffer (or the stage) may take new data
      if constexpr (Tr::kDQInStage) arrive(&bar.q_empty[stage]);
    }
    __syncwarp();
    if constexpr (!Tr::kDQInStage)
      if (step + Tr::kDQStages < w.steps) named_barrier_arrive(kDQFree + dq_buffer, Tr::kDQMeeting);
    // Deterministic mode: the sums performed, then the count, a release over
    // them; after the buffer is handed back, so that the consumers need not
    // wait for the sums to land.
    if (issues && turn) {
      tma_store_wait_all();
      add_release(turn, 1);
    }
  }
  if (issues) tma_store_wait_all();
}

// acc (+)= A·Bᵀ over the first kDepth columns, A and B K-major (head_dim
// contiguous): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ. A holds a_rows rows per panel, B b_rows.
template <typename T, int kDepth, int N>
__device__ __forceinline__ void issue_kmajor(float (&acc)[N / 2], uint64_t a, int a_rows,
                                             uint64_t b, int b_rows) {
#pragma unroll
  for (int kk = 0; kk < kDepth / 16; ++kk) {
    const uint32_t step = (kk % 4) * 32;  // 16 columns = 32 bytes into the 128-byte row
    Wgmma<T, N>::ss(acc, advance(a, (kk / 4) * a_rows * 128 + step),
                    advance(b, (kk / 4) * b_rows * 128 + step), kk > 0);
  }
}

// A part of a split tile (core/tail_split.h): its dV and
// scale·dK added into the tile's fp32 sums from the accumulators (a 8-byte
// reduction per pair of columns); the consumers then count the part done, and
// the last part to finish reads the sums back from L2 and writes dK and dV,
// each thread its own fragment's elements.
template <typename T, class Tr, int kDKValues, int kDVValues>
__device__ __forceinline__ void finish_tail_part(const BackwardKernelParams& kp,
                                                 const BackwardWalk& w, const float (&dk)[kDKValues],
                                                 const float (&dv)[kDVValues], int key_row,
                                                 int kv_col0, int v_col0, float dv_scale) {
  constexpr int kD = Tr::kHeadDim, kBlockN = Tr::kBlockN;
  const BwdParams& p = kp.p;
  const Sizes& s = p.sizes;
  const int t = threadIdx.x % 4;
  float* dk_sums = kp.tail_sums + int64_t(w.tail) * 2 * kBlockN * kD;
  float* dv_sums = dk_sums + kBlockN * kD;
  // Element 4j + 2h + e of an accumulator of n values: key row key_row + 8h,
  // column col0 + 8j + 2t + e.
  const auto add = [&](float* sums, const auto& acc, int col0, int n, float scale) {
#pragma unroll
    for (int j = 0; j < n / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        atomicAdd(reinterpret_cast<float2*>(sums + (key_row + 8 * h) * kD + col0 + 8 * j + 2 * t),
                  make_float2(acc[4 * j + 2 * h] * scale, acc[4 * j + 2 * h + 1] * scale));
  };
  add(dv_sums, dv, v_col0, kDVValues, dv_scale);
  add(dk_sums, dk, kv_col0, kDKValues, p.softmax.scale);
  if (!arrive_last(kp.tail_counts + w.tail, kp.tail.parts, kKVDone, 256, threadIdx.x == 128))
    return;
  const auto store = [&](const TensorRef& grad, const float* sums, int col0, int n, int width) {
#pragma unroll
    for (int j = 0; j < n / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = w.key0 + key_row + 8 * h, col = col0 + 8 * j + 2 * t;
        if (key >= s.seqlen_k || col >= width) continue;
        const float2 x = __ldcg(reinterpret_cast<const float2*>(sums + (key_row + 8 * h) * kD + col));
        const int64_t at = int64_t(w.b) * grad.batch_stride + int64_t(w.hk) * grad.head_stride +
                           int64_t(key) * grad.row_stride + col;
        *reinterpret_cast<uint32_t*>(static_cast<T*>(grad.data) + at) = pack_pair<T>(x.x, x.y);
      }
  };
  store(p.grad.dv, dv_sums, v_col0, kDVValues, s.head_dim_v);
  store(p.grad.dk, dk_sums, kv_col0, kDKValues, s.head_dim);
}

// kDQFirst: this step's dQ share is issued before dV's and dK's products (after
// the dSᵀ barrier) and written out once it completes, while they run.
template <typename T, class Tr, class Variant, bool kPacked, bool kSplitsTail, bool kDQFirst>
__device__ __forceinline__ void backward_consumer(const BackwardKernelParams& kp,
                                                  const BackwardWalk& w, const BlockSequence* block,
                                                  uint8_t* smem, BackwardBarriers<Tr>& bar,
                                                  int warpgroup) {
  static_assert(!kDQFirst || !Tr::kDQInStage, "kDQFirst: dQ in a buffer of its own");
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kD = Tr::kHeadDim;
  constexpr int kRows = Tr::kScoreRows, kCols = Tr::kKVCols, kVCols = Tr::kVCols;
  constexpr bool kLowerEnds = Variant::kLowerEnds;
  // At d64 a thread holds 128 query columns of Sᵀ and dPᵀ; there, with dSᵀ
  // stored by stmatrix, the kernels spilled 8–40 bytes (cuda_wgmma_backward.md,
  // v17), so dSᵀ goes out by 32-bit stores.
  constexpr bool kWideRows = kRows > 64;
  static_assert(!kWideRows || !Tr::kSplitsColumns, "Pᵀ's store is stmatrix's alone");
  using Score = typename Variant::Score;
  // With two dQ buffers, a step's share goes to the dQ warp after the next
  // step's dSᵀ fence (the last one's after the epilogue's), which orders its
  // stores too: one proxy fence a step, not two, and that one after the
  // stores have had a step to drain (cuda_wgmma_backward.md, v18). With one
  // buffer the consumers would wait for its read-out; in the stage, the stage
  // would be held a step longer; the bias kernel spilled 4 bytes with it.
  constexpr bool kDQHandedLate = Tr::kDQStages >= 2 && !Score::kBias;
  const BwdParams& p = kp.p;
  const Sizes& s = p.sizes;
  const RowMask& mask = kPacked ? block->mask : dense_mask(p);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const float c = p.softmax.scale_log2;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // This warpgroup's keys (rows of K and V, K-major A operands), and its
  // thread's two key rows within the tile; its query rows of Sᵀ and dPᵀ, tile
  // rows score_row0 + [0, kRows) (split by columns, the other consumer's start
  // at other_row0); its columns of dK, kv_col0 + [0, kCols), and of dV,
  // v_col0 + [0, kVCols).
  const int wg_key0 = Tr::kSplitsColumns ? 0 : 64 * warpgroup;
  const int key_row = wg_key0 + 16 * warp + g;
  const int score_row0 = Tr::kSplitsColumns ? kRows * warpgroup : 0;
  const int other_row0 = kRows - score_row0;
  const int kv_col0 = Tr::kSplitsColumns ? kCols * warpgroup : 0;
  const int v_col0 = Tr::kSplitsColumns ? kVCols * warpgroup : 0;
  const uint64_t k_rows = smem_descriptor(base + Tr::kKOffset + wg_key0 * 128, 16, 1024);
  const uint64_t v_rows = smem_descriptor(base + Tr::kVOffset + wg_key0 * 128, 16, 1024);
  // This warpgroup's share of dQ: rows dq_row0 + [0, 64), columns dq_col0 +
  // [0, kDQCols); K's columns of it as dQ's MN-major B operand (keys are the K
  // dimension).
  const int dq_row0 = Tr::kDQSplitsRows ? 64 * warpgroup : 0;
  const int dq_col0 = Tr::kDQSplitsRows ? 0 : Tr::kDQCols * warpgroup;
  const uint64_t k_mn =
      smem_descriptor(base + Tr::kKOffset + dq_col0 / 64 * kBlockN * 128, kBlockN * 128, 1024);

  float dv[kVCols / 2], dk[kCols / 2];
#pragma unroll
  for (int i = 0; i < kVCols / 2; ++i) dv[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) dk[i] = 0.0f;

  wait_barrier(&bar.kv_full, 0);
  QueryTile tile = w.first();
  for (int step = 0; step < w.steps; ++step, tile = tile.next(w)) {
    const int stage = step % Tr::kQStages;
    const uint32_t filled = (step / Tr::kQStages) & 1;
    const int row0 = tile.m * kBlockM;
    const uint32_t q_at = base + Tr::q_offset(stage);
    const uint32_t dout_at = base + Tr::dout_offset(stage);
    const int row_first = row0 + score_row0;

    float st[kRows / 2], dpt[kRows / 2];
    wait_barrier(&bar.q_full[stage], filled);
    wgmma_fence();
    issue_kmajor<T, Tr::kHeadDimQK, kRows>(st, k_rows, kBlockN,
                               smem_descriptor(q_at + score_row0 * 128, 16, 1024), kBlockM);
    wgmma_commit();
    wait_barrier(&bar.dout_full[stage], filled);
    issue_kmajor<T, Tr::kHeadDimV, kRows>(dpt, v_rows, kBlockN,
                               smem_descriptor(dout_at + score_row0 * 128, 16, 1024), kBlockM);
    wgmma_commit();
    // Dropout: bit i set where element i is kept, made while the products run; all
    // set without dropout.
    uint64_t kept = ~uint64_t(0);
    if constexpr (Variant::kDropout) {
      if (p.dropout.on())
        kept = kept_bits_transposed<kRows / 2>(dropout_rows(p.dropout, w.b, s.heads_q, tile.hq),
                                               row_first + 2 * t, w.key0 + key_row);
    }

    // Pᵀ; element (i) of the fragment is key row key_row + 8·((i / 2) % 2),
    // query column score_row0 + 8·(i / 4) + 2t + i % 2.
    const float* lse2 =
        reinterpret_cast<const float*>(smem + Tr::kLseOffset) + stage * kBlockM + score_row0;
    const float* dot =
        reinterpret_cast<const float*>(smem + Tr::kRowDotOffset) + stage * kBlockM + score_row0;
    const int key_first = w.key0 + wg_key0;
    const int seqlen_q = kPacked ? mask.seqlen_q : s.seqlen_q;
    const bool cut = row0 + kBlockM > seqlen_q || mask.beyond_end(row0, key_first + 63) ||
                     (kLowerEnds && mask.key_begin(row0 + kBlockM - 1) > key_first);
    // Whether (row, key) of the tile takes no part: the row or the key does not exist, or the mask hides it.
    const auto hidden = [&](int row, int key) {
      return row >= seqlen_q || (kLowerEnds ? mask.hidden(row, key) : mask.beyond_end(row, key));
    };
    // The same for the elements of this thread's fragment, as ranges: for each
    // of its two keys (h = 0, 1: key_row + 8h), the query columns that see it
    // (RowMask::rows_seeing), as offsets [lo[h], hi[h]) from its first column
    // row_first + 2t (element (j, e) lies at 8j + e % 2). So the select is two
    // comparisons with constants an element.
    const auto seen_columns = [&](int (&lo)[2], int (&hi)[2]) {
      const int first = row_first + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const RowRange seeing = mask.rows_seeing(w.key0 + key_row + 8 * h, 1);
        lo[h] = ::min(::max(seeing.begin - first, 0), kRows);
        hi[h] = ::min(::max(seeing.end - first, 0), kRows);
      }
    };
    // Dropout: dPᵀ takes Z (keep scale or 0) before dSᵀ is made; Pᵀ keeps the
    // kept elements alone for dV's product.
    const auto drop_scores = [&] {
      if constexpr (Variant::kDropout) {
        if (p.dropout.on()) {
          const float keep_scale = p.dropout.keep_scale;
#pragma unroll
          for (int i = 0; i < kRows / 2; ++i) dpt[i] = (kept >> i) & 1 ? dpt[i] * keep_scale : 0.0f;
        }
      }
    };
    const auto drop_probabilities = [&] {
      if constexpr (Variant::kDropout) {
        if (p.dropout.on()) {
#pragma unroll
          for (int i = 0; i < kRows / 2; ++i) st[i] = (kept >> i) & 1 ? st[i] : 0.0f;
        }
      }
    };
    // A window alone changes no score: the plain order, Pᵀ under dPᵀ's product.
    if (Score::kIdentity || !p.scores.any()) {
      wgmma_wait<1>();
      fence_registers(st);
      // Pᵀ. Split by keys, the element loop is instantiated per value of `cut`
      // (kCut) and called under one branch: tested per element, the select's
      // branches kept ptxas from overlapping the exponentials, each waited for
      // in turn (~40 cycles an element, 1.3 thousand of a d128 step's 4.8),
      // and on cut tiles the select is two comparisons (seen_columns). Split
      // by columns, the test stays per element: hoisted, the d256 kernel ran
      // 5–16% slower (docs/perf/cuda_wgmma_backward.md, v10).
      const auto probabilities = [&](auto kCut) {
        int lo[2], hi[2];
        if constexpr (kCut) seen_columns(lo, hi);
#pragma unroll
        for (int j = 0; j < kRows / 8; ++j) {
          const float2 l = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * t);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = 4 * j + e;
            float prob = fast_exp2(fmaf(st[i], c, -(e % 2 ? l.y : l.x)));
            if constexpr (Tr::kSplitsColumns) {
              if (cut && hidden(row_first + 8 * j + 2 * t + e % 2, w.key0 + key_row + 8 * (e / 2)))
                prob = 0.0f;
            } else if constexpr (kCut) {
              const int at = 8 * j + e % 2;
              if (at < lo[e / 2] || at >= hi[e / 2]) prob = 0.0f;
            }
            st[i] = prob;
          }
        }
      };
      if constexpr (Tr::kSplitsColumns) probabilities(std::false_type{});
      else if (cut) probabilities(std::true_type{});
      else probabilities(std::false_type{});
      wgmma_wait<0>();
      fence_registers(dpt);
      drop_scores();
#pragma unroll
      for (int j = 0; j < kRows / 8; ++j) {
        const float2 d = *reinterpret_cast<const float2*>(dot + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - (e % 2 ? d.y : d.x));
      }
      drop_probabilities();
    } else if constexpr (!Score::kIdentity) {
      // A score variant: Pᵀ and dSᵀ in one pass once both products are done, so
      // that the variant's derivative is used where it is made, not kept in
      // registers beside Sᵀ and dPᵀ.
      const Score score = Variant::score(p.scores, p.softmax.scale, w.b, tile.hq, mask.alignment);
      // ALiBi's distance of this thread's first (row, key), stepped by constants.
      const float distance0 = score.distance(row_first + 2 * t, w.key0 + key_row);
      wgmma_wait<0>();
      fence_registers(st);
      fence_registers(dpt);
      drop_scores();
      // bias: the bias's reader for its element type (Score::kBias), else
      // NoBiasReader; hidden elements (past seqlen_q or seqlen_k among them)
      // are not read.
      const auto probabilities = [&](const auto& bias) {
#pragma unroll
        for (int j = 0; j < kRows / 8; ++j) {
          const float2 l = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * t);
          const float2 d = *reinterpret_cast<const float2*>(dot + 8 * j + 2 * t);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = 4 * j + e;
            const int row = row_first + 8 * j + 2 * t + e % 2, key = w.key0 + key_row + 8 * (e / 2);
            const bool is_hidden = cut && hidden(row, key);
            float dscore;
            float x = score.at(st[i], distance0 + float(8 * j + e % 2 - 8 * (e / 2)), dscore);
            if constexpr (Score::kBias) {
              if (!is_hidden) x += bias.at(bias.row_at(row), key);
            }
            float prob = fast_exp2(fmaf(x, c, -(e % 2 ? l.y : l.x)));
            if (is_hidden) prob = 0.0f;
            st[i] = prob;
            dpt[i] = prob * (dpt[i] - (e % 2 ? d.y : d.x)) * dscore;
          }
        }
      };
      if constexpr (Score::kBias) score.bias.read(probabilities);
      else probabilities(NoBiasReader{});
      drop_probabilities();
    }
    uint32_t pt[kRows / 16][4], dst[kRows / 16][4];
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pt[kk][r] = pack_pair<T>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
        dst[kk][r] = pack_pair<T>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
      }

    // dV += Pᵀ·dO and dK += dSᵀ·Q over this warpgroup's query rows, Pᵀ and dSᵀ
    // from registers: dO and Q (its columns of them) as MN-major B, query rows
    // being the K dimension.
    const uint64_t dout_mn =
        smem_descriptor(dout_at + v_col0 / 64 * kBlockM * 128, kBlockM * 128, 1024);
    const uint64_t q_mn = smem_descriptor(q_at + kv_col0 / 64 * kBlockM * 128, kBlockM * 128, 1024);
    const auto issue_dv_dk = [&] {
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk)
        Wgmma<T, kVCols>::rs(dv, pt[kk], advance(dout_mn, (score_row0 + 16 * kk) * 128), 1);
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk)
        Wgmma<T, kCols>::rs(dk, dst[kk], advance(q_mn, (score_row0 + 16 * kk) * 128), 1);
      wgmma_commit();
    };
    if constexpr (!kDQFirst) {
      wgmma_fence();
      issue_dv_dk();
    }

    // dSᵀ (split by columns, Pᵀ too) into buffer step % 2 (A-fragment register
    // r: key row + 8·(r % 2), query column score_row0 + 16·kk + 8·(r / 2) + 2t).
    // Both warpgroups pass this step's barrier only after their products of
    // the step before (which read the other buffer) completed, so a buffer is
    // free again two steps on. By stmatrix, whose four 8×8 matrices are a 16-
    // column group's four registers: lane l gives the 16 bytes of key row
    // l % 16 of the warp's 16, query columns 8·(l / 16) on of the group (four
    // STSM a thread at d128, where 16 STS.32 took a tenth of the consumers'
    // stall samples); at d64 (kWideRows) by 32-bit stores.
    const int buffer = step % 2;
    const uint32_t ds_tile = Tr::kDSOffset + buffer * Tr::kDSBytes;
    const uint32_t pt_tile = Tr::kPTOffset + buffer * Tr::kDSBytes;
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk) {
      if constexpr (kWideRows) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint32_t at = swizzled_offset(key_row + 8 * (r % 2),
                                              score_row0 + 16 * kk + 8 * (r / 2) + 2 * t, kBlockN);
          *reinterpret_cast<uint32_t*>(smem + ds_tile + at) = dst[kk][r];
        }
      } else {
        const uint32_t at = swizzled_offset(wg_key0 + 16 * warp + lane % 16,
                                            score_row0 + 16 * kk + 8 * (lane / 16), kBlockN);
        stmatrix_x4(base + ds_tile + at, dst[kk][0], dst[kk][1], dst[kk][2], dst[kk][3]);
        if constexpr (Tr::kSplitsColumns)
          stmatrix_x4(base + pt_tile + at, pt[kk][0], pt[kk][1], pt[kk][2], pt[kk][3]);
      }
    }
    fence_shared_to_async();
    if constexpr (kDQHandedLate)
      if (step > 0) named_barrier_arrive(kDQFull + Tr::dq_buffer(step - 1), Tr::kDQMeeting);
    named_barrier_sync(kDSReady + buffer, 256);

    wgmma_fence();
    if constexpr (Tr::kSplitsColumns) {
      // The other warpgroup's query rows of dV's and dK's products: its Pᵀ and
      // dSᵀ from shared memory, K-major A.
      const uint64_t pt_rows = smem_descriptor(base + Tr::kPTOffset + buffer * Tr::kDSBytes, 16, 1024);
      const uint64_t ds_rows = smem_descriptor(base + Tr::kDSOffset + buffer * Tr::kDSBytes, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {
        const int row = other_row0 + 16 * kk;
        Wgmma<T, kVCols>::ss_mn_b(dv, advance(pt_rows, row * 2), advance(dout_mn, row * 128), 1);
      }
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {
        const int row = other_row0 + 16 * kk;
        Wgmma<T, kCols>::ss_mn_b(dk, advance(ds_rows, row * 2), advance(q_mn, row * 128), 1);
      }
    }
    // This warpgroup's share of dQ = dS·K over the block's keys (both halves
    // of dSᵀ, MN-major), issued behind dV's and dK's products (kDQFirst: ahead
    // of them).
    float dq[Tr::kDQCols / 2];
    const uint64_t ds_mn = smem_descriptor(
        base + Tr::kDSOffset + buffer * Tr::kDSBytes + dq_row0 * kBlockN * 2, kBlockN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      Wgmma<T, Tr::kDQCols>::ss_mn(dq, advance(ds_mn, kk * 16 * 128), advance(k_mn, kk * 16 * 128),
                                   kk > 0);
    wgmma_commit();
    if constexpr (kDQFirst) {
      issue_dv_dk();
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
      // Every thread: it read Q, dO, lse2 and D (where dQ goes into the stage,
      // once it wrote its share there).
      if constexpr (!Tr::kDQInStage) arrive(&bar.q_empty[stage]);
    }
    fence_registers(dq);

    // The share into dQ buffer step % kDQStages, in the layout of the fp32 sums
    // (rows [row0, row0 + kBlockM) of them are contiguous there), once the dQ
    // warp has seen the buffer's last reduction read out; or into the step's
    // stage once both warpgroups' products are done with it. Then (a step
    // later where kDQHandedLate) to the dQ warp, which adds the buffer to the
    // sums by one bulk reduction.
    const int dq_buffer = Tr::dq_buffer(step);
    if constexpr (Tr::kDQInStage) named_barrier_sync(kStageRead, 256);
    else if (step >= Tr::kDQStages) named_barrier_sync(kDQFree + dq_buffer, Tr::kDQMeeting);
    float* dq_tile = reinterpret_cast<float*>(smem + Tr::dq_offset(step));
#pragma unroll
    for (int j = 0; j < Tr::kDQCols / 8; ++j) {
      // Where the sums are narrower than the bucket, the columns past them
      // (products on k's zero columns) are not kept.
      if constexpr (Tr::kDQWidth < kD)
        if (dq_col0 + 8 * j >= Tr::kDQWidth) continue;
      *reinterpret_cast<float4*>(dq_tile +
                                 dq_tile_offset(dq_row0 + 16 * warp, dq_col0 + 8 * j, Tr::kDQWidth) +
                                 4 * lane) =
          make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
    }
    if constexpr (!kDQHandedLate) {
      fence_shared_to_async();
      if constexpr (Tr::kDQInStage) arrive(&bar.q_empty[stage]);
      named_barrier_arrive(kDQFull + dq_buffer, Tr::kDQMeeting);
    }
    if constexpr (kDQFirst) {  // dV's and dK's products done reading Q and dO
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
      arrive(&bar.q_empty[stage]);
    }
  }

  const float dv_scale = Variant::kDropout ? p.dropout.keep_scale : 1.0f;  // dropout's
  // A part of a split tile: dK and dV added in fp32, the last part writes
  // them. Only in the kernels that split (kSplitsTail).
  if constexpr (kSplitsTail) {
    if (w.tail >= 0) {
      if constexpr (kDQHandedLate) {
        fence_shared_to_async();
        named_barrier_arrive(kDQFull + Tr::dq_buffer(w.steps - 1), Tr::kDQMeeting);
      }
      wait_for_previous_grid();  // the split tile's sums, zeroed by the D pass
      finish_tail_part<T, Tr>(kp, w, dk, dv, key_row, kv_col0, v_col0, dv_scale);
      return;
    }
  }
  // dV and scale·dK into V's and K's tiles (this warpgroup's keys and
  // columns), once the other warpgroup's products are done with K; then out by
  // TMA, the panels that hold columns below head_dim (dK) and head_dim_v (dV).
  named_barrier_sync(kKVDone, 256);
#pragma unroll
  for (int j = 0; j < kVCols / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t at = swizzled_offset(key_row + 8 * h, v_col0 + 8 * j + 2 * t, kBlockN);
      *reinterpret_cast<uint32_t*>(smem + Tr::kVOffset + at) =
          pack_pair<T>(dv[4 * j + 2 * h] * dv_scale, dv[4 * j + 2 * h + 1] * dv_scale);
    }
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t at = swizzled_offset(key_row + 8 * h, kv_col0 + 8 * j + 2 * t, kBlockN);
      *reinterpret_cast<uint32_t*>(smem + Tr::kKOffset + at) = pack_pair<T>(
          dk[4 * j + 2 * h] * p.softmax.scale, dk[4 * j + 2 * h + 1] * p.softmax.scale);
    }
  fence_shared_to_async();
  if constexpr (kDQHandedLate)
    if (w.steps > 0) named_barrier_arrive(kDQFull + Tr::dq_buffer(w.steps - 1), Tr::kDQMeeting);
  named_barrier_sync(kStored + warpgroup, 128);
  // This warpgroup's tiles out by TMA, at key row `row` of batch index `batch`.
  const auto store_boxes = [&](int row, int batch) {
#pragma unroll
    for (int panel = kv_col0 / 64; panel < (kv_col0 + kCols) / 64 && 64 * panel < s.head_dim; ++panel)
      tma_store(&kp.dk, 64 * panel, row, w.hk, batch,
                smem + Tr::kKOffset + panel * kBlockN * 128 + wg_key0 * 128);
#pragma unroll
    for (int panel = v_col0 / 64; panel < (v_col0 + kVCols) / 64 && 64 * panel < s.head_dim_v; ++panel)
      tma_store(&kp.dv, 64 * panel, row, w.hk, batch,
                smem + Tr::kVOffset + panel * kBlockN * 128 + wg_key0 * 128);
    tma_store_commit();
    tma_store_wait_read();
  };
  if constexpr (kPacked) {
    // The keys of the block's sequence; its last ones row by row, 16 bytes a
    // thread, so that nothing is written into the next sequence's rows.
    const int keys = w.keys - wg_key0;
    const int key_row0 = int(block->seq.k_row0) + w.key0 + wg_key0;
    if (keys >= 64) {
      if (threadIdx.x % 128 == 0) store_boxes(key_row0, 0);
      return;
    }
    // Rows [0, keys) of the tile at `tile`, columns [col0, col0 + cols) below `width`.
    const auto store_rows = [&](const TensorRef& grad, uint32_t tile, int col0, int cols, int width) {
      const int chunks = cols / 8;
      for (int i = threadIdx.x % 128; i < keys * chunks; i += 128) {
        const int row = i / chunks, col = col0 + 8 * (i % chunks);
        if (col >= width) continue;
        const int64_t at =
            int64_t(key_row0 + row) * grad.row_stride + int64_t(w.hk) * grad.head_stride + col;
        *reinterpret_cast<uint4*>(static_cast<T*>(grad.data) + at) = *reinterpret_cast<const uint4*>(
            smem + tile + swizzled_offset(wg_key0 + row, col, kBlockN));
      }
    };
    store_rows(p.grad.dk, Tr::kKOffset, kv_col0, kCols, s.head_dim);
    store_rows(p.grad.dv, Tr::kVOffset, v_col0, kVCols, s.head_dim_v);
  } else if (threadIdx.x % 128 == 0 && w.key0 + wg_key0 < s.seqlen_k) {
    store_boxes(w.key0 + wg_key0, w.b);
  }
}

// kSplitsTail: the grid's last key tiles are split (kp.tail, launch_backward);
// a kernel of its own, so that the split's code costs the unsplit grids
// nothing (in one kernel, d64's unsplit points read 0.97–0.99× v18's:
// cuda_wgmma_backward.md, v19.1).
template <typename T, class Tr, class Variant, bool kPacked, bool kSplitsTail = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    backward_kernel(const __grid_constant__ BackwardKernelParams kp) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kSplitsTail || (!kPacked && std::is_same_v<Variant, NoVariant>),
                "a split tail: dense batches, plain attention");
  static_assert(Tr::kDQInStage ? Tr::kQStages <= 2 : Tr::kDQStages <= 2,
                "kDQFull + b stays below kDQFree, kDQFree + b below kKVDone");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes; tiles start on that boundary.
  // An offset from smem_raw (a multiple of 16, as the compiler can see), not an
  // address rebuilt from an integer, so that the compiler still knows the
  // pointer is shared memory and 16-byte aligned: its loads and stores are then
  // LDS and STS, vectors where the code asks for them, not generic ones.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024 - raw % 1024) % 1024 & ~15u);
  auto& bar = *reinterpret_cast<BackwardBarriers<Tr>*>(smem + Tr::kBarrierOffset);
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (threadIdx.x == 0) {
    ::cuda::ptx::mbarrier_init(&bar.kv_full, 1);
    for (int stage = 0; stage < Tr::kQStages; ++stage) {
      ::cuda::ptx::mbarrier_init(&bar.q_full[stage], 65);  // the TMA lane, both stats warps' lanes
      ::cuda::ptx::mbarrier_init(&bar.dout_full[stage], 1);
      ::cuda::ptx::mbarrier_init(&bar.q_empty[stage], Tr::kStageReleases);
    }
    if constexpr (kPacked) {
      ::cuda::ptx::mbarrier_init(&bar.kv_landed, 1);
      for (int stage = 0; stage < Tr::kQStages; ++stage)
        ::cuda::ptx::mbarrier_init(&bar.q_landed[stage], 1);
    }
    ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
  }
  __syncthreads();
  const BackwardWalk w =
      backward_walk<Tr::kBlockM, Tr::kBlockN>(kp.p, kp.query_tiles, kp.turn_group,
                                              kp.adds_from_first,
                                              kSplitsTail ? kp.tail : TailSplit{});
  // Packed, the block's sequence in shared memory; dense batches have none.
  const BlockSequence* block = nullptr;
  if constexpr (kPacked) {
    if (w.keys <= 0) return;  // past the sequence's keys: nothing to load or store
    __shared__ BlockSequence packed_block;
    if (threadIdx.x == 0) {
      packed_block.seq = sequence(kp.p, w.b);
      packed_block.mask = row_mask(kp.p, packed_block.seq);
    }
    __syncthreads();
    block = &packed_block;
  }
  if (warpgroup == 0) {
    release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x < 32) backward_producer<Tr, kPacked>(kp, w, block, smem, bar);
    else if (threadIdx.x < 64) backward_dq_writer<Tr, kPacked>(kp, w, block, smem, bar);
    else if (threadIdx.x < 96) backward_stats_loader<Tr, kPacked, true>(kp, w, block, smem, bar);
    else backward_stats_loader<Tr, kPacked, false>(kp, w, block, smem, bar);
  } else {
    claim_registers<Tr::kConsumerRegisters>();
    // The second consumer issues its dQ share before its dV and dK products
    // and writes it out while they run: with both consumers in one order, both
    // stored dQ at once after all their products, the tensor pipe idle under
    // it (5.5% at d64, 1.7% at d128, cuda_wgmma_backward.md v16). The first
    // keeps dV and dK ahead of its dSᵀ store, which they cover. Split by
    // columns the products interlock differently; and at d64 the variant
    // kernels, holding both consumers' bodies, spilled 32–212 bytes with it.
    // Elsewhere one body serves both.
    if constexpr (!Tr::kSplitsColumns && (Tr::kBlockM == 64 || std::is_same_v<Variant, NoVariant>)) {
      if (warpgroup == 1)
        backward_consumer<T, Tr, Variant, kPacked, kSplitsTail, false>(kp, w, block, smem, bar, 0);
      else
        backward_consumer<T, Tr, Variant, kPacked, kSplitsTail, true>(kp, w, block, smem, bar, 1);
    } else {
      backward_consumer<T, Tr, Variant, kPacked, kSplitsTail, false>(kp, w, block, smem, bar,
                                                                     warpgroup - 1);
    }
  }
#endif
}

}  // namespace flashattn::cuda::sm90
