// The 16-bit attention forward for Hopper (sm_90a): TMA loads into a
// shared-memory ring guarded by mbarriers, wgmma products, warp specialisation.
//
// A query tile is kBlockM = 64·kConsumers rows of one (batch, q head); a block
// computes one tile, or, persistent, walks several (for_each_tile).
// Warpgroup 0 is the producer: one thread loads each tile's Q, then K_j and
// V_j for each visible key block j (last to first) into the next slot of a
// kStages-deep ring. The other warpgroups are consumers of 64 rows each,
// taking turns on the tensor cores. Per row i, with c = scale·log2(e):
//   m_i = max over keys seen of s_ij (raw scores),
//   l_i = Σ_j 2^((s_ij − m_i)·c),  acc_i = Σ_j 2^((s_ij − m_i)·c)·v_j,  out_i = acc_i / l_i.
// A consumer issues S' = Q·K_jᵀ and acc += P·V_{j+1} back to back and waits for
// S' first. Its softmax of block j runs under the other consumers' products
// (the turns), not under its own P·V_{j+1}: ptxas schedules the wait for P·V at
// the top of the basic block that holds the softmax (seen in the SASS), and
// putting a block boundary between them, which restores that overlap, measured
// no faster (docs/perf-notes.md, v4.9). P stays in registers: the accumulator
// layout of S, packed to 16 bits, is wgmma's A-fragment layout.
// Key blocks that need masking (the causal diagonal, the ragged end of
// seqlen_k) come first; blocks above the diagonal are never loaded.
// Persistent d-128 tiles may run in pairs, two blocks of a cluster sharing
// each K and V load (Traits::kCluster).
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/traits.h"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_ops.cuh"
#include "params.h"

namespace flashattn::cuda::sm90 {

// What the kernel needs of AttnParams, with the tensors as TMA descriptors.
struct KernelParams {
  CUtensorMap q, k, v, o;  // (head_dim, seqlen, heads, batch), 64-column boxes
  Sizes sizes;
  MaskSpec mask;
  float* lse;
  float scale;       // for lse, in natural-log units
  float scale_log2;  // c = scale·log2(e)
  int m_blocks;      // query tiles per (batch, q head)
  int row_shift;     // tile m covers rows [m·kBlockM − row_shift, +kBlockM); see tile_row_shift
  int tiles;         // query tiles in all: m_blocks · batch · heads_q
  bool heads_fastest;  // tile order: see tile_at
};

// A query tile and the key blocks it visits.
struct Tile {
  int m_block, batch, head_q, head_kv;
  int row0;      // its first query row, negative when the tile starts before row 0
  int n_blocks;  // key blocks [0, n_blocks) hold a key visible to some row of the tile
};

// How many key blocks hold a key visible to some query row in [row0, row0 + rows):
// the last real row sees the most keys. 0 when no row of them lies in
// [0, seqlen_q).
template <class Tr>
__device__ __forceinline__ int visible_key_blocks(const KernelParams& p, int row0, int rows) {
  const int last_row = min(row0 + rows, p.sizes.seqlen_q) - 1;
  if (last_row < max(row0, 0)) return 0;
  return (p.mask.key_end(last_row, p.sizes.seqlen_k) + Tr::kBlockN - 1) / Tr::kBlockN;
}

// The index-th query tile. Causal tiles near the end of the sequence see the
// most keys, so they start first. With heads_fastest (causal, few heads, few
// waves; see launch.cuh), consecutive tiles are the same query tile of
// neighbouring heads: every head's heaviest tile, then every head's next, so
// the last wave holds only light tiles. Otherwise consecutive tiles are
// neighbouring query tiles of one head (heaviest first if causal), and the
// blocks running at once share its K and V in L2.
template <class Tr>
__device__ __forceinline__ Tile tile_at(const KernelParams& p, int index) {
  const Sizes& s = p.sizes;
  int bh, m_block;
  if (p.heads_fastest) {
    const int heads = s.batch * s.heads_q;
    bh = index % heads;
    m_block = p.m_blocks - 1 - index / heads;
  } else {
    bh = index / p.m_blocks;
    m_block = index % p.m_blocks;
    if (p.mask.causal) m_block = p.m_blocks - 1 - m_block;
  }
  const int head_q = bh % s.heads_q;
  const int row0 = m_block * Tr::kBlockM - p.row_shift;
  return {m_block, bh / s.heads_q, head_q, head_q / s.group(), row0,
          visible_key_blocks<Tr>(p, row0, Tr::kBlockM)};
}

template <class Tr>
struct Barriers {
  uint64_t q_full[Tr::kQStages], q_empty[Tr::kQStages];
  uint64_t k_full[Tr::kStages], k_empty[Tr::kStages];
  uint64_t v_full[Tr::kStages], v_empty[Tr::kStages];
};

// Named barriers: 1 to 3 gather one consumer warpgroup before its output
// store; 4 to 6 are the consumers' turns on the tensor cores.
constexpr int kEpilogueBarrier = 1;
constexpr int kTurnBarrier = 4;

// The consumer warpgroups take turns issuing products: a warpgroup waits for
// its turn, issues, and hands the turn to the next (0 → 1 → ... → 0), so the
// tensor cores serve them in rotation and each one's softmax runs under the
// others' products (ping-pong for two). The last warpgroup hands warpgroup 0
// the first turn; every warpgroup takes one turn per key block of the block's
// tiles and one more at the end, and the last does not hand over after its
// last, so every barrier sees as many arrivals as waits.
template <int kConsumers>
struct TensorCoreTurns {
  int warpgroup;
  __device__ __forceinline__ void start() const {
    if (warpgroup == kConsumers - 1) hand_over();
  }
  __device__ __forceinline__ void wait() const {
    named_barrier_sync(kTurnBarrier + warpgroup, 256);
  }
  __device__ __forceinline__ void hand_over() const {
    named_barrier_arrive(kTurnBarrier + (warpgroup + 1) % kConsumers, 256);
  }
  __device__ __forceinline__ void finish() const {
    if (warpgroup != kConsumers - 1) hand_over();
  }
};

// Which slot of a kSlots-deep ring the it-th load of the block's run uses, and
// the phase parities that mark it filled (consumers wait) and free (the producer
// waits; a fresh barrier counts as free). The K/V ring counts key blocks
// (Tr::kStages slots), the Q buffers count loaded Qs (Tr::kQStages).
template <int kSlots>
struct RingPosition {
  int it;
  __device__ __forceinline__ int stage() const { return it % kSlots; }
  __device__ __forceinline__ uint32_t filled_parity() const { return (it / kSlots) & 1; }
  __device__ __forceinline__ uint32_t free_parity() const { return filled_parity() ^ 1; }
};

// A block's tiles: one per block (gridDim.x = tiles), or, persistent, round r
// gives the r-th run of gridDim.x tiles one to each block, the runs walked in
// alternating directions. Tiles come heaviest first (causal), so a block that
// takes a run's heaviest tile takes the next run's lightest; the launch makes
// gridDim.x a multiple of the per-head tile count where tiles repeat per head.
template <class F>
__device__ __forceinline__ void for_each_tile(const KernelParams& p, F&& f) {
  const int blocks = int(gridDim.x);
  for (int round = 0;; ++round) {
    const int index =
        round * blocks + ((round & 1) ? blocks - 1 - int(blockIdx.x) : int(blockIdx.x));
    if (index >= p.tiles) return;
    f(index);
  }
}

// The producer thread: for each tile, Q once its buffer is free, then K and V
// of each visible key block, last to first, into the ring as its stages free
// up. The ring runs on across tiles, so the next tile's first blocks load
// while this one finishes. Paired, it loads its block's half of each K and V
// block (keys [rank·kBoxRows, +kBoxRows) of it) into both blocks' rings.
template <class Tr>
__device__ __forceinline__ void producer(const KernelParams& p, uint8_t* smem, Barriers<Tr>& bar) {
  const int half_row0 = Tr::kCluster == 1 ? 0 : int(cluster_rank()) * Tr::kBoxRows;
  RingPosition<Tr::kQStages> q{0};
  RingPosition<Tr::kStages> ring{0};
  for_each_tile(p, [&](int index) {
    const Tile t = tile_at<Tr>(p, index);
    if (t.n_blocks == 0) return;  // no Q, no keys: the consumers write 0 and -inf
    // Free once every consumer warp is done with the Q it held before (a fresh
    // barrier counts as free).
    const int qs = q.stage();
    wait_barrier(&bar.q_empty[qs], q.free_parity());
    ++q.it;
    expect_bytes(&bar.q_full[qs], Tr::kQBytes);
#pragma unroll
    for (int panel = 0; panel < Tr::kPanels; ++panel)
      tma_load(smem + Tr::kQOffset + qs * Tr::kQBytes + panel * Tr::kBlockM * 128, &p.q,
               64 * panel, t.row0, t.head_q, t.batch, &bar.q_full[qs]);
    for (int n_block = t.n_blocks - 1; n_block >= 0; --n_block, ++ring.it) {
      const auto load = [&](const CUtensorMap* map, uint32_t offset, uint64_t* full,
                            uint64_t* empty) {
        wait_barrier(empty, ring.free_parity());
        expect_bytes(full, Tr::kKVBytes);
        uint8_t* dst = smem + offset + ring.stage() * Tr::kKVBytes + half_row0 * 128;
        const int row = n_block * Tr::kBlockN + half_row0;
#pragma unroll
        for (int panel = 0; panel < Tr::kPanels; ++panel) {
          if constexpr (Tr::kCluster == 1)
            tma_load(dst + panel * Tr::kBlockN * 128, map, 64 * panel, row, t.head_kv, t.batch, full);
          else
            tma_load_multicast(dst + panel * Tr::kBlockN * 128, map, 64 * panel, row, t.head_kv,
                               t.batch, full, (1u << Tr::kCluster) - 1);
        }
      };
      load(&p.k, Tr::kKOffset, &bar.k_full[ring.stage()], &bar.k_empty[ring.stage()]);
      load(&p.v, Tr::kVOffset, &bar.v_full[ring.stage()], &bar.v_empty[ring.stage()]);
    }
  });
  // Paired, the block may leave only once the other block's consumers have
  // released every slot: their releases arrive on this block's barriers.
  if constexpr (Tr::kCluster > 1) {
#pragma unroll
    for (int i = 0; i < Tr::kStages; ++i, ++ring.it) {
      wait_barrier(&bar.k_empty[ring.stage()], ring.free_parity());
      wait_barrier(&bar.v_empty[ring.stage()], ring.free_parity());
    }
  }
}

// S[64 × kBlockN] = Q(warpgroup rows)·K(stage)ᵀ, issued; the caller commits.
template <typename T, class Tr>
__device__ __forceinline__ void issue_scores(float (&s)[Tr::kBlockN / 2], uint64_t q_desc,
                                             uint64_t k_desc) {
#pragma unroll
  for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
    const uint32_t step = (kk % 4) * 32;  // 16 columns = 32 bytes into the 128-byte row
    Wgmma<T, Tr::kBlockN>::ss(s, advance(q_desc, (kk / 4) * Tr::kBlockM * 128 + step),
                              advance(k_desc, (kk / 4) * Tr::kBlockN * 128 + step), kk > 0);
  }
}

// acc[64 × kHeadDim] += P·V(stage), issued; the caller commits.
template <typename T, class Tr>
__device__ __forceinline__ void issue_values(float (&acc)[Tr::kHeadDim / 2],
                                             const uint32_t (&p)[Tr::kBlockN / 16][4],
                                             uint64_t v_desc) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
    Wgmma<T, Tr::kHeadDim>::rs(acc, p[kk], advance(v_desc, kk * 16 * 128), 1);
}

// A thread's place in the accumulator layout of m64nN: element i of its
// fragment is row row0 + 8·((i % 4) / 2), column 8·(i / 4) + 2·(lane % 4) + i % 2.
struct FragmentCoord {
  int row0;  // within the block's kBlockM rows
  int col0;  // 2·(lane % 4)
};

// Writes -inf over scores of keys that row i may not see (beyond seqlen_k, or
// beyond the causal limit i + offset).
template <class Tr>
__device__ __forceinline__ void mask_scores(float (&s)[Tr::kBlockN / 2], const KernelParams& p,
                                            const FragmentCoord& at, int row_base, int n_block) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key_end = p.mask.key_end(int64_t(row_base) + at.row0 + 8 * half, p.sizes.seqlen_k);
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (n_block * Tr::kBlockN + 8 * j + at.col0 + e >= key_end) s[4 * j + 2 * half + e] = -INFINITY;
  }
}

// The online-softmax update for one key block: raises the running maxima,
// turns s into unnormalised probabilities 2^((s − m)·c), adds them to the
// row sums, and returns each row's rescale factor for acc.
template <class Tr>
__device__ __forceinline__ void softmax_update(float (&s)[Tr::kBlockN / 2], float (&row_max)[2],
                                               float (&row_sum)[2], float (&alpha)[2], float c) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float block_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
      block_max = fmaxf(block_max, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
    block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
    block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
    const float m_new = fmaxf(row_max[half], block_max);
    // A row with no visible key so far keeps m = -inf; subtract 0 instead, so
    // that no (-inf) − (-inf) appears.
    const float m_scaled = (m_new == -INFINITY) ? 0.0f : m_new * c;
    alpha[half] = fast_exp2(row_max[half] * c - m_scaled);
    row_max[half] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * j + 2 * half + e];
        x = fast_exp2(fmaf(x, c, -m_scaled));
        sum += x;
      }
    row_sum[half] = row_sum[half] * alpha[half] + sum;
  }
}

template <typename T, class Tr>
__device__ __forceinline__ void pack_probabilities(const float (&s)[Tr::kBlockN / 2],
                                                   uint32_t (&p)[Tr::kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack_pair<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

template <class Tr>
__device__ __forceinline__ void rescale(float (&acc)[Tr::kHeadDim / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < Tr::kHeadDim / 2; ++i) acc[i] *= alpha[(i % 4) / 2];
}

// out = acc / l through the output staging buffer (this warpgroup's 64 rows of
// it) and TMA stores, which drop rows past seqlen_q and columns past head_dim;
// lse per row. Rows with no visible key (l = 0) get 0 and -inf; `empty`: no
// row of the warpgroup saw a key, and acc (another tile's) is not read. The
// stores are left in flight: the next epilogue (or the block's end) waits for
// them to have read the buffer.
template <typename T, class Tr>
__device__ __forceinline__ void epilogue(const KernelParams& p, const Tile& t, uint8_t* smem,
                                         const float (&acc)[Tr::kHeadDim / 2],
                                         const float (&row_max)[2], float (&row_sum)[2],
                                         bool empty, const FragmentCoord& at, int warpgroup,
                                         int warp, int lane) {
  float inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = row_sum[half];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    row_sum[half] = l;
    inv[half] = l > 0.0f ? 1.0f / l : 0.0f;
  }
  const bool storer = warp == 0 && lane == 0;
  if (storer) tma_store_wait_read();  // the previous tile's output has left the buffer
  named_barrier_sync(kEpilogueBarrier + warpgroup, 128);
  const uint32_t so = static_cast<uint32_t>(__cvta_generic_to_shared(smem + Tr::kOOffset));
  const int stm_row = 64 * warpgroup + 16 * warp + lane % 16;
#pragma unroll
  for (int jj = 0; jj < Tr::kHeadDim / 16; ++jj) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      r[q] = empty ? 0u
                   : pack_pair<T>(acc[8 * jj + 2 * q] * inv[q % 2],
                                  acc[8 * jj + 2 * q + 1] * inv[q % 2]);
    stmatrix_x4(so + swizzled_offset(stm_row, 16 * jj + 8 * (lane / 16), Tr::kBlockM), r[0], r[1],
                r[2], r[3]);
  }
  fence_shared_to_async();
  named_barrier_sync(kEpilogueBarrier + warpgroup, 128);
  if (storer && t.row0 + 64 * warpgroup >= 0) {  // a warpgroup before row 0 has no rows
#pragma unroll
    for (int panel = 0; panel < Tr::kPanels; ++panel)
      tma_store(&p.o, 64 * panel, t.row0 + 64 * warpgroup, t.head_q, t.batch,
                smem + Tr::kOOffset + panel * Tr::kBlockM * 128 + 64 * warpgroup * 128);
    tma_store_commit();
  }
  if (p.lse != nullptr && lane % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = t.row0 + at.row0 + 8 * half;
      if (row >= 0 && row < p.sizes.seqlen_q) {
        const float l = row_sum[half];
        p.lse[(int64_t(t.batch) * p.sizes.heads_q + t.head_q) * p.sizes.seqlen_q + row] =
            l > 0.0f ? row_max[half] * p.scale + logf(l) : -INFINITY;
      }
    }
  }
}

// A consumer warpgroup: its 64 rows of each of the block's tiles. In the turn
// of each key block it issues that block's S = Q·Kᵀ together with the P·V of
// the block before. A tile's last P·V is owed to the next turn, the next
// tile's first: the next tile's first scores run with it, and that block's
// softmax and then the finished tile's epilogue run under the other
// warpgroups' products, with no drain between tiles (docs/perf-notes.md,
// v4.13). The last P·V of all takes one more turn at the end.
//
// A tile's first key blocks (in visiting order) may hold no key that a row of
// this warpgroup sees: the causal diagonal above its rows, or all of them when
// its rows lie past seqlen_q (a ragged last tile) or before row 0 (a causal
// first tile shifted by row_shift). It computes nothing there, but still takes
// their turns and releases their slots, so every barrier counts the same
// arrivals. Every warp waits for each loaded Q and releases it once: a parity
// wait that skipped a phase could pass on the one before.
template <typename T, class Tr>
__device__ __forceinline__ void consumer(const KernelParams& p, uint8_t* smem, Barriers<Tr>& bar,
                                         int warpgroup) {
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const FragmentCoord at{64 * warpgroup + 16 * warp + lane / 4, 2 * (lane % 4)};
  const float c = p.scale_log2;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const auto k_desc = [&](int stage) {
    return smem_descriptor(base + Tr::kKOffset + stage * Tr::kKVBytes, 16, 1024);
  };
  const auto v_desc = [&](int stage) {
    return smem_descriptor(base + Tr::kVOffset + stage * Tr::kKVBytes, Tr::kBlockN * 128, 1024);
  };
  const auto release = [&](uint64_t* barrier) {
    if (lane == 0) arrive(barrier);
  };
  // A K or V slot: paired, the other block's producer writes into it too.
  const auto release_slot = [&](uint64_t* barrier) {
    if (lane != 0) return;
    if constexpr (Tr::kCluster == 1) arrive(barrier);
    else
      for (uint32_t rank = 0; rank < Tr::kCluster; ++rank) arrive_in_cluster(barrier, rank);
  };
  const TensorCoreTurns<Tr::kConsumers> turns{warpgroup};

  float acc[Tr::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < Tr::kHeadDim / 2; ++i) acc[i] = 0.0f;
  float row_max[2], row_sum[2];
  float s[Tr::kBlockN / 2];
  uint32_t probs[Tr::kBlockN / 16][4];
  float alpha[2];
  // The owed P·V: probs times V of ring position `owed`, the last of tile
  // `owed_tile`, whose row statistics are still in row_max and row_sum.
  bool pv_owed = false;
  RingPosition<Tr::kStages> owed{0};
  int owed_tile = 0;
  const auto issue_owed = [&] {
    wait_barrier(&bar.v_full[owed.stage()], owed.filled_parity());
    issue_values<T, Tr>(acc, probs, v_desc(owed.stage()));
  };
  // Once the owed P·V is done: its V slot freed, its tile written with its
  // final row statistics.
  const auto retire_owed = [&](const float (&tile_max)[2], float (&tile_sum)[2]) {
    release_slot(&bar.v_empty[owed.stage()]);
    epilogue<T, Tr>(p, tile_at<Tr>(p, owed_tile), smem, acc, tile_max, tile_sum, false, at,
                    warpgroup, warp, lane);
#pragma unroll
    for (int i = 0; i < Tr::kHeadDim / 2; ++i) acc[i] = 0.0f;
    pv_owed = false;
  };

  RingPosition<Tr::kStages> ring{0};
  RingPosition<Tr::kQStages> q{0};
  turns.start();
  for_each_tile(p, [&](int index) {
    const Tile t = tile_at<Tr>(p, index);
    const int qs = q.stage();
    const int wg_row0 = t.row0 + 64 * warpgroup;
    const int wg_blocks = visible_key_blocks<Tr>(p, wg_row0, 64);
    for (int skipped = 0; skipped < t.n_blocks - wg_blocks; ++skipped, ++ring.it) {
      wait_barrier(&bar.k_full[ring.stage()], ring.filled_parity());
      release_slot(&bar.k_empty[ring.stage()]);
      const auto skip_values = [&] {
        wait_barrier(&bar.v_full[ring.stage()], ring.filled_parity());
        release_slot(&bar.v_empty[ring.stage()]);
      };
      turns.wait();
      if (pv_owed) {  // issued and waited for under one condition (see the end)
        wgmma_fence();
        issue_owed();
        wgmma_commit();
        turns.hand_over();
        skip_values();  // before the epilogue: the producer refills the slot
        wgmma_wait<0>();
        fence_registers(acc);
        retire_owed(row_max, row_sum);
      } else {
        turns.hand_over();
        skip_values();
      }
    }
    if (wg_blocks == 0) {  // no row of the warpgroup sees a key: 0 and -inf
      if (t.n_blocks > 0) {
        wait_barrier(&bar.q_full[qs], q.filled_parity());
        release(&bar.q_empty[qs]);
      }
      float no_max[2] = {-INFINITY, -INFINITY}, no_sum[2] = {0.0f, 0.0f};
      epilogue<T, Tr>(p, t, smem, acc, no_max, no_sum, true, at, warpgroup, warp, lane);
    } else {
      // Blocks whose last key lies beyond seqlen_k or the causal limit of the
      // warpgroup's first row may hold keys some row must not see.
      const int64_t first_row_limit = int64_t(wg_row0) + p.mask.causal_offset;
      const auto needs_mask = [&](int n_block) {
        const int64_t last_key = int64_t(n_block + 1) * Tr::kBlockN - 1;
        return last_key >= p.sizes.seqlen_k || (p.mask.causal && last_key > first_row_limit);
      };
      const uint64_t q_desc = smem_descriptor(
          base + Tr::kQOffset + qs * Tr::kQBytes + 64 * warpgroup * 128, 16, 1024);

      // The first block, with the previous tile's last P·V if owed (the
      // second commit group, empty if not).
      wait_barrier(&bar.q_full[qs], q.filled_parity());
      wait_barrier(&bar.k_full[ring.stage()], ring.filled_parity());
      turns.wait();
      wgmma_fence();
      issue_scores<T, Tr>(s, q_desc, k_desc(ring.stage()));
      wgmma_commit();
      if (pv_owed) issue_owed();
      wgmma_commit();
      turns.hand_over();
      wgmma_wait<1>();
      fence_registers(s);
      release_slot(&bar.k_empty[ring.stage()]);
      float done_max[2], done_sum[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        done_max[half] = row_max[half], done_sum[half] = row_sum[half];
        row_max[half] = -INFINITY, row_sum[half] = 0.0f;
      }
      if (needs_mask(wg_blocks - 1)) mask_scores<Tr>(s, p, at, t.row0, wg_blocks - 1);
      softmax_update<Tr>(s, row_max, row_sum, alpha, c);
      wgmma_wait<0>();
      fence_registers(acc);
      if (pv_owed) retire_owed(done_max, done_sum);
      pack_probabilities<T, Tr>(s, probs);

      for (int n_block = wg_blocks - 2; n_block >= 0; --n_block) {
        const RingPosition<Tr::kStages> prev = ring;  // holds V of the block after n_block
        ++ring.it;
        wait_barrier(&bar.k_full[ring.stage()], ring.filled_parity());
        turns.wait();
        wgmma_fence();
        issue_scores<T, Tr>(s, q_desc, k_desc(ring.stage()));
        wgmma_commit();
        wait_barrier(&bar.v_full[prev.stage()], prev.filled_parity());
        issue_values<T, Tr>(acc, probs, v_desc(prev.stage()));
        wgmma_commit();
        turns.hand_over();
        wgmma_wait<1>();
        fence_registers(s);
        release_slot(&bar.k_empty[ring.stage()]);
        if (needs_mask(n_block)) mask_scores<Tr>(s, p, at, t.row0, n_block);
        softmax_update<Tr>(s, row_max, row_sum, alpha, c);
        wgmma_wait<0>();
        fence_registers(acc);
        release_slot(&bar.v_empty[prev.stage()]);
        rescale<Tr>(acc, alpha);
        pack_probabilities<T, Tr>(s, probs);
      }
      release(&bar.q_empty[qs]);  // every Q·Kᵀ of the tile has completed
      pv_owed = true;
      owed = ring;
      owed_tile = index;
      ++ring.it;
    }
    q.it += t.n_blocks > 0;
  });
  // The last P·V: its issue and its wait under one condition (split between
  // two, ptxas serialised every wgmma of the kernel).
  turns.wait();
  if (pv_owed) {
    wgmma_fence();
    issue_owed();
    wgmma_commit();
    turns.finish();
    wgmma_wait<0>();
    fence_registers(acc);
    retire_owed(row_max, row_sum);
  } else {
    turns.finish();
  }
  if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the buffer outlives the last stores
}

template <typename T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    forward_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes; tiles start on that boundary.
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  auto& bar = *reinterpret_cast<Barriers<Tr>*>(smem + Tr::kBarrierOffset);
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < Tr::kQStages; ++stage) {
      ::cuda::ptx::mbarrier_init(&bar.q_full[stage], 1);
      ::cuda::ptx::mbarrier_init(&bar.q_empty[stage], Tr::kQReleases);
    }
    for (int stage = 0; stage < Tr::kStages; ++stage) {
      ::cuda::ptx::mbarrier_init(&bar.k_full[stage], 1);
      ::cuda::ptx::mbarrier_init(&bar.v_full[stage], 1);
      ::cuda::ptx::mbarrier_init(&bar.k_empty[stage], Tr::kSlotReleases);
      ::cuda::ptx::mbarrier_init(&bar.v_empty[stage], Tr::kSlotReleases);
    }
    ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
  }
  // Paired, the other block's loads and releases reach these barriers.
  if constexpr (Tr::kCluster == 1) __syncthreads();
  else cluster_sync();

  if (warpgroup == 0) {
    release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x == 0) producer<Tr>(p, smem, bar);
  } else {
    claim_registers<Tr::kConsumerRegisters>();
    consumer<T, Tr>(p, smem, bar, warpgroup - 1);
  }
#endif
}

}  // namespace flashattn::cuda::sm90
