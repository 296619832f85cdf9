// The compute side of the Hopper forward's mainloop: a consumer warpgroup's walk
// over its tiles' key blocks (Q·Kᵀ and P·V on wgmma, the score step, the online
// softmax) and the turns the consumers take on the tensor cores.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dropout.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/score.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tail_merge.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_ops.cuh"

namespace flashattn::cuda::sm90 {

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

// Split by columns (Traits::kSplitColumns), the two consumers issue together:
// each needs the other's partial scores before its softmax, so turns would
// only delay the second. The softmax runs under both consumers' P·V. A lone
// consumer has no one to take turns with; its softmax runs under its own P·V.
struct NoTurns {
  __device__ __forceinline__ explicit NoTurns(int) {}
  __device__ __forceinline__ void start() const {}
  __device__ __forceinline__ void wait() const {}
  __device__ __forceinline__ void hand_over() const {}
  __device__ __forceinline__ void finish() const {}
};

// Split by columns: s holds this consumer's half of Q·Kᵀ's depth; the other
// consumer's half is added through shared memory, so that both hold the whole
// S (x + y = y + x in floating point: their softmaxes agree to the bit). Each
// writes its part as float4s, thread-fastest (no bank conflicts), at block
// parity `parity`: that buffer is written again two blocks later, after the
// barrier of the block between, which the other consumer reaches only once
// it has read this one. Otherwise nothing.
template <class Tr>
__device__ __forceinline__ void add_partial_scores(float (&s)[Tr::kBlockN / 2], uint8_t* smem,
                                                   int warpgroup, int parity) {
  if constexpr (Tr::kSplitColumns) {
    constexpr int kPartBytes = 64 * Tr::kBlockN * 4;
    const int thread = int(threadIdx.x) % 128;
    float4* own = reinterpret_cast<float4*>(smem + Tr::kExchangeOffset +
                                            (2 * parity + warpgroup) * kPartBytes);
    const float4* other = reinterpret_cast<const float4*>(
        smem + Tr::kExchangeOffset + (2 * parity + 1 - warpgroup) * kPartBytes);
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j)
      own[128 * j + thread] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
    named_barrier_sync(kExchangeBarrier, 256);
#pragma unroll
    for (int j = 0; j < Tr::kBlockN / 8; ++j) {
      const float4 o = other[128 * j + thread];
      s[4 * j] += o.x, s[4 * j + 1] += o.y, s[4 * j + 2] += o.z, s[4 * j + 3] += o.w;
    }
  }
}

// S[64 × kBlockN] = Q(warpgroup rows)·K(stage)ᵀ over the first kHeadDimQK
// columns (the rest of the bucket's are zeros), issued; the caller commits.
// Split by columns, over the consumer's share: Part::kDepth columns from the
// descriptors' panel on, the first `first_step` 16-column steps into it (not
// 0 where a share is not whole panels: the second's 128 from 160 at width 288).
template <typename T, class Tr, class Part>
__device__ __forceinline__ void issue_scores(float (&s)[Tr::kBlockN / 2], uint64_t q_desc,
                                             uint64_t k_desc, uint32_t first_step) {
#pragma unroll
  for (int kk = 0; kk < Part::kDepth / 16; ++kk) {
    const uint32_t step = first_step + kk;
    const uint32_t within = (step % 4) * 32;  // 16 columns = 32 bytes into the 128-byte row
    Wgmma<T, Tr::kBlockN>::ss(s, advance(q_desc, (step / 4) * Tr::kBlockM * 128 + within),
                              advance(k_desc, (step / 4) * Tr::kBlockN * 128 + within), kk > 0);
  }
}

// acc[64 × Part::kAccCols] += P·V(stage), issued; the caller commits.
// accumulate false: acc = P·V, whatever acc held (a tile's first P·V).
// kRowSumsByMma: sums[64 × 8] += P·ones likewise, each column the rows' sums,
// from P in fp16 (p16; Traits::kRowSumsByMma says why).
template <typename T, class Tr, class Part>
__device__ __forceinline__ void issue_values(float (&acc)[Part::kAccCols / 2], float (&sums)[4],
                                             const uint32_t (&p)[Tr::kBlockN / 16][4],
                                             const uint32_t (&p16)[Tr::kBlockN / 16][4],
                                             uint64_t v_desc, uint64_t ones_desc,
                                             bool accumulate) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
    Wgmma<T, Part::kAccCols>::rs(acc, p[kk], advance(v_desc, kk * 16 * 128),
                               kk > 0 || accumulate);
  if constexpr (Tr::kRowSumsByMma) {
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
      Wgmma<__half, 8>::rs(sums, p16[kk], ones_desc, kk > 0 || accumulate);
  }
}

// A consumer warpgroup: its 64 rows of each of the block's tiles. In the turn
// of each key block it issues that block's S = Q·Kᵀ together with the P·V of
// the block before. A tile's last P·V is owed to the next turn, the next
// tile's first: the next tile's first scores run with it, and that block's
// softmax and then the finished tile's epilogue run under the other
// warpgroups' products, with no drain between tiles (docs/perf/cuda_wgmma.md,
// v4.13). The last P·V of all takes one more turn at the end.
//
// A tile's first key blocks (in visiting order) may hold no key that a row of
// this warpgroup sees: the causal diagonal above its rows, or all of them when
// its rows lie past seqlen_q (a ragged last tile) or before row 0 (a causal
// first tile shifted by row_shift). It computes nothing there, but still takes
// their turns and releases their slots, so every barrier counts the same
// arrivals. Every warp waits for each loaded Q and releases it once: a parity
// wait that skipped a phase could pass on the one before.
//
// Under a window the tile's last blocks in visiting order (its lowest) may lie
// below a warpgroup's rows' key ranges: the warpgroup computes them with every
// score masked (at most a block or two: its rows start 64 after the tile's
// first), which keeps the turns as they are. With a score variant
// (core/variant.h) every block takes the score step.
//
// A split tile's part (kSplitsTail, tail_merge.cuh) walks its share of the
// key blocks and hands its rows to finish_tail_part instead of the epilogue.
// kPart: the consumer's share of the columns where the shares differ
// (ConsumerPart), else 0.
template <typename T, class Tr, class Variant, bool kPacked, int kPart>
__device__ __forceinline__ void consumer(const KernelParams& p, uint8_t* smem, Barriers<Tr>& bar,
                                         int warpgroup) {
  constexpr bool kLowerEnds = Variant::kLowerEnds;
  constexpr bool kSplits = kSplitsTail<Tr, Variant, kPacked>;
  static_assert(!Tr::kRowSumsByMma || !Variant::kDropout,
                "dropout's sums hold the probabilities it drops from P·V");
  using Score = typename Variant::Score;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  using Part = ConsumerPart<Tr, kPart>;
  const Part part(warpgroup);
  const FragmentCoord at{64 * part.group + 16 * warp + lane / 4, 2 * (lane % 4)};
  const float c = p.scale_log2;
  // Dropout (core/dropout.h): the kept probabilities' scale, applied with 1/l.
  const float out_scale = Variant::kDropout ? p.dropout.keep_scale : 1.0f;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // Split by columns, the consumer's columns of V start at its first panel, and
  // its share of Q·Kᵀ's depth at column depth0, a whole number of 16-column
  // steps into a panel (issue_scores).
  const uint32_t v_part = (part.col0 / 64) * Tr::kBlockN * 128;
  const uint32_t depth_panel = part.depth0 / 64, depth_step = (part.depth0 % 64) / 16;
  const auto k_desc = [&](int stage) {
    return smem_descriptor(
        base + Tr::kKOffset + stage * Tr::kKBytes + depth_panel * Tr::kBlockN * 128, 16, 1024);
  };
  const auto v_desc = [&](int stage) {
    return smem_descriptor(base + Tr::kVOffset + stage * Tr::kVBytes + v_part, Tr::kBlockN * 128,
                           1024);
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
  using Turns = std::conditional_t<Tr::kSplitColumns || Tr::kConsumers == 1, NoTurns,
                                   TensorCoreTurns<Tr::kConsumers>>;
  const Turns turns{warpgroup};
  int exchanges = 0;  // split by columns: the key blocks whose scores were added so far

  float acc[Part::kAccCols / 2];
#pragma unroll
  for (int i = 0; i < Part::kAccCols / 2; ++i) acc[i] = 0.0f;
  // kRowSumsByMma: the rows' sums as the tensor cores add them (issue_values),
  // every column of a row the same; row_sum is then unused.
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint64_t ones_desc = smem_descriptor(base + Tr::kOnesOffset, 1024, 1024);
  float row_max[2], row_sum[2];
  float s[Tr::kBlockN / 2];
  uint32_t probs[Tr::kBlockN / 16][4];
  // kRowSumsByMma: P packed to fp16 for the sums (T's own packing where T is fp16).
  uint32_t half_probs[Tr::kBlockN / 16][4];
  const auto sum_probs = [&]() -> const uint32_t (&)[Tr::kBlockN / 16][4] {
    if constexpr (std::is_same_v<T, __half>) return probs;
    else return half_probs;
  };
  const auto pack = [&] {
    pack_probabilities<T, Tr>(s, probs);
    if constexpr (Tr::kRowSumsByMma && !std::is_same_v<T, __half>)
      pack_probabilities<__half, Tr>(s, half_probs);
  };
  float alpha[2];
  // The owed P·V: probs times V of ring position `owed`, the last of tile
  // `owed_tile`, whose row statistics are still in row_max and row_sum. The
  // tile is kept, not its index: tile_at's divisions cost its epilogue about
  // 100 instructions (docs/perf/cuda_wgmma.md, v4.17).
  // A tile's first P·V overwrites acc (wgmma's scale-d) instead of adding to
  // zeros: zeroing acc after every epilogue took a 128-key tile 62
  // instructions at d 64 (docs/perf/cuda_wgmma.md, v4.30). The walk's first
  // P·V is the tile's first; the owed one adds unless the walk had no other
  // (owed_adds).
  bool pv_owed = false, owed_adds = false;
  RingPosition<Tr::kStages> owed{0};
  Tile owed_tile{};
  const auto issue_owed = [&] {
    wait_barrier(&bar.v_full[owed.stage()], owed.filled_parity());
    issue_values<T, Tr, Part>(acc, sums, probs, sum_probs(), v_desc(owed.stage()), ones_desc,
                        owed_adds);
  };
  // A tile's rows out with their row statistics: a split tile's part to the
  // merge, any other tile through the epilogue. at_end (a std::bool_constant):
  // written after the walk, the only place where a split kernel's one tile
  // per block (with rows) is written; the merge is compiled there alone
  // (inside the walk too, it cost the d64 kernel 316 bytes of spills).
  const auto write_rows = [&](const Tile& t, const RowMask& mask, const float (&tile_max)[2],
                              const float (&tile_sum)[2], bool empty, auto at_end) {
    if constexpr (kSplits && decltype(at_end)::value) {
      if (t.tail >= 0)
        return finish_tail_part<T, Tr>(p, t, mask, smem, acc, tile_max, tile_sum, at, warpgroup,
                                       warp, lane);
    }
    epilogue<T, Tr, Variant::Score::kBias, kPacked, kPart>(p, t, mask, smem, acc, tile_max,
                                                           tile_sum, empty, at, warpgroup, warp,
                                                           lane, out_scale);
  };
  // Once the owed P·V is done: its V slot freed, its tile written with its
  // final row statistics.
  const auto retire_owed = [&](const float (&tile_max)[2], const float (&tile_sum)[2],
                               auto at_end, bool free_slot = true) {
    if (free_slot) release_slot(&bar.v_empty[owed.stage()]);
    RowMask owed_mask;
    const RowMask& mask = tile_mask<kPacked>(p, owed_tile, owed_mask);
    if constexpr (Tr::kRowSumsByMma) {
      const float whole[2] = {sums[0], sums[2]};
      write_rows(owed_tile, mask, tile_max, whole, false, at_end);
    } else {
      write_rows(owed_tile, mask, tile_max, tile_sum, false, at_end);
    }
    pv_owed = false;
  };

  RingPosition<Tr::kStages> ring{0};
  RingPosition<Tr::kQStages> q{0};
  turns.start();
  for_each_tile<kPacked>(p, [&](int index) {
    const Tile t = tile_at<Tr, kLowerEnds, kPacked, kSplits>(p, index);
    if (kPacked && !t.has_rows()) return;  // past its sequence: nothing loaded, nothing stored
    RowMask own_mask;
    const RowMask& mask = tile_mask<kPacked>(p, t, own_mask);
    const int qs = q.stage();
    const int wg_row0 = t.row0 + 64 * part.group;
    // Blocks [t.n_first, wg_end) hold every key this warpgroup's rows see (a
    // part's: those of its share).
    int wg_end = max(t.n_first, visible_key_blocks<Tr, false>(mask, wg_row0, 64).end);
    if constexpr (kSplits) wg_end = min(wg_end, t.n_end);
    for (int skipped = 0; skipped < t.n_end - wg_end; ++skipped, ++ring.it) {
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
        wgmma_wait<0>();
        fence_registers(acc);
        fence_registers(sums);
        // The owed V slot is freed before this block's V is waited for: a packed
        // sequence's last V block is marked full only once the producer has
        // issued the load after it (producer.cuh, SequenceEnd), which with two
        // stages goes into the owed slot.
        release_slot(&bar.v_empty[owed.stage()]);
        skip_values();  // before the epilogue: the producer refills the slot
        retire_owed(row_max, row_sum, std::false_type{}, false);
      } else {
        turns.hand_over();
        skip_values();
      }
    }
    if (wg_end == t.n_first) {  // no row of the warpgroup sees a key: 0 and -inf
      if (t.n_end > t.n_first) {
        wait_barrier(&bar.q_full[qs], q.filled_parity());
        release(&bar.q_empty[qs]);
      }
      const float no_max[2] = {-INFINITY, -INFINITY}, no_sum[2] = {0.0f, 0.0f};
      // (A split tile's warpgroup here has its rows past seqlen_q, in every
      // part: nothing of it reaches the output, so no part merges it.)
      write_rows(t, mask, no_max, no_sum, true, std::false_type{});
    } else {
      // Blocks whose last key lies beyond the keys the warpgroup's first row sees
      // (beyond seqlen_k, or beyond its causal limit) need the score step; the
      // key range's upper end grows with the row, so the other rows see them
      // too. With three consumer warpgroups (head dim 64) that is asked per
      // block: the warpgroup's KeyBlocks held through the loop measured 4-6%
      // slower there, ncu showing twice the barrier stalls (v4.15). With one or two,
      // the KeyBlocks answer with one int compare, where the per-block test's
      // 64-bit product and compare made most of the d256 key loop's growth
      // beyond 046770d's (docs/perf/cuda_wgmma.md).
      const KeyBlocks wg_keys = mask.key_blocks<kLowerEnds, true>(wg_row0, 64, Tr::kBlockN);
      // A score variant changes every score (a window alone only the cut blocks).
      const bool rescores = !Score::kIdentity && p.scores.any();
      const auto needs_mask = [&](int n_block) {
        if constexpr (Tr::kConsumers < 3)
          return rescores || wg_keys.needs_mask<kLowerEnds>(n_block);
        else
          return rescores || wg_keys.lower_end_in<kLowerEnds>(n_block) ||
                 mask.beyond_end(wg_row0, int64_t(n_block + 1) * Tr::kBlockN - 1);
      };
      const Score score = Variant::score(p.scores, p.scale, t.batch, t.head_q, mask.alignment);
      // Dropout: block n_block's keep bits, made while its scores' wgmma runs;
      // the dropped probabilities are zeroed after the softmax has summed them.
      const auto keep_bits = [&](int n_block) -> uint64_t {
        if constexpr (Variant::kDropout) {
          if (p.dropout.on())
            return kept_bits<Tr::kBlockN / 2>(
                dropout_rows(p.dropout, t.batch, p.sizes.heads_q, t.head_q), t.row0 + at.row0,
                int64_t(n_block) * Tr::kBlockN + at.col0);
        }
        return ~uint64_t(0);
      };
      const auto drop = [&](uint64_t bits) {
        if constexpr (Variant::kDropout) {
          if (p.dropout.on()) {
#pragma unroll
            for (int i = 0; i < Tr::kBlockN / 2; ++i) s[i] = (bits >> i) & 1 ? s[i] : 0.0f;
          }
        }
      };
      const uint64_t q_desc =
          smem_descriptor(base + Tr::kQOffset + qs * Tr::kQBytes + 64 * part.group * 128 +
                              depth_panel * Tr::kBlockM * 128,
                          16, 1024);

      // The first block, with the previous tile's last P·V if owed (the
      // second commit group, empty if not).
      wait_barrier(&bar.q_full[qs], q.filled_parity());
      wait_barrier(&bar.k_full[ring.stage()], ring.filled_parity());
      turns.wait();
      wgmma_fence();
      issue_scores<T, Tr, Part>(s, q_desc, k_desc(ring.stage()), depth_step);
      wgmma_commit();
      if (pv_owed) issue_owed();
      wgmma_commit();
      turns.hand_over();
      uint64_t kept = keep_bits(wg_end - 1);
      wgmma_wait<1>();
      fence_registers(s);
      release_slot(&bar.k_empty[ring.stage()]);
      add_partial_scores<Tr>(s, smem, warpgroup, exchanges++ & 1);
      float done_max[2], done_sum[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        done_max[half] = row_max[half], done_sum[half] = row_sum[half];
        row_max[half] = -INFINITY, row_sum[half] = 0.0f;
      }
      if (needs_mask(wg_end - 1))
        score_step<Tr, Variant>(s, mask, wg_keys, at, t.row0, wg_end - 1, score);
      softmax_update<Tr>(s, row_max, row_sum, alpha, c);
      drop(kept);
      wgmma_wait<0>();
      fence_registers(acc);
      fence_registers(sums);
      if (pv_owed) retire_owed(done_max, done_sum, std::false_type{});
      pack();

      for (int n_block = wg_end - 2; n_block >= t.n_first; --n_block) {
        const RingPosition<Tr::kStages> prev = ring;  // holds V of the block after n_block
        ++ring.it;
        wait_barrier(&bar.k_full[ring.stage()], ring.filled_parity());
        turns.wait();
        wgmma_fence();
        issue_scores<T, Tr, Part>(s, q_desc, k_desc(ring.stage()), depth_step);
        wgmma_commit();
        wait_barrier(&bar.v_full[prev.stage()], prev.filled_parity());
        issue_values<T, Tr, Part>(acc, sums, probs, sum_probs(), v_desc(prev.stage()),
                                  ones_desc, n_block != wg_end - 2);
        wgmma_commit();
        turns.hand_over();
        kept = keep_bits(n_block);
        wgmma_wait<1>();
        fence_registers(s);
        release_slot(&bar.k_empty[ring.stage()]);
        add_partial_scores<Tr>(s, smem, warpgroup, exchanges++ & 1);
        if (needs_mask(n_block))
          score_step<Tr, Variant>(s, mask, wg_keys, at, t.row0, n_block, score);
        softmax_update<Tr>(s, row_max, row_sum, alpha, c);
        drop(kept);
        wgmma_wait<0>();
        fence_registers(acc);
        fence_registers(sums);
        release_slot(&bar.v_empty[prev.stage()]);
        rescale(acc, alpha);
        if constexpr (Tr::kRowSumsByMma) rescale(sums, alpha);
        pack();
      }
      release(&bar.q_empty[qs]);  // every Q·Kᵀ of the tile has completed
      pv_owed = true;
      owed_adds = wg_end - 2 >= t.n_first;
      owed = ring;
      owed_tile = t;
      ++ring.it;
    }
    q.it += t.n_end > t.n_first;
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
    fence_registers(sums);
    retire_owed(row_max, row_sum, std::true_type{});
  } else {
    turns.finish();
  }
  if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the buffer outlives the last stores
}

}  // namespace flashattn::cuda::sm90
