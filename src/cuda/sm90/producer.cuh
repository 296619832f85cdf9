// The load side of the Hopper forward's mainloop: the mbarriers of the ring and
// the producer thread that fills it with TMA loads of Q, K and V.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace flashattn::cuda::sm90 {

template <class Tr>
struct Barriers {
  uint64_t q_full[Tr::kQStages], q_empty[Tr::kQStages];
  uint64_t k_full[Tr::kStages], k_empty[Tr::kStages];
  uint64_t v_full[Tr::kStages], v_empty[Tr::kStages];
  // Packed: a sequence's last V block lands here, and v_full completes once
  // the producer's warp has zeroed its keys past the sequence's end.
  uint64_t v_landed[Tr::kStages];
};

// Which slot of a kSlots-deep ring the it-th load of the block's run uses, and
// the phase parities that mark it filled (consumers wait) and free (the producer
// waits; a fresh barrier counts as free). The K/V ring counts key blocks
// (Tr::kStages slots), the Q buffers count loaded Qs (Tr::kQStages). Unsigned:
// the slot and parity are then a mask and a shift (signed, ~20 instructions of
// a 128-key tile's path at d 64).
template <int kSlots>
struct RingPosition {
  uint32_t it;
  __device__ __forceinline__ int stage() const { return int(it % kSlots); }
  __device__ __forceinline__ uint32_t filled_parity() const { return (it / kSlots) & 1; }
  __device__ __forceinline__ uint32_t free_parity() const { return filled_parity() ^ 1; }
};

// A sequence's last V block of a packed batch, landing in ring slot `stage`:
// its keys from `keys` on belong to the next sequence (or lie past the
// tensor's end, where TMA gave zeros). Their probabilities are 0, but 0·inf
// and 0·NaN are NaN, so another sequence's non-finite values would reach this
// one's rows: the producer's warp overwrites them with zeros before the
// consumers may read the slot (v_full). stage < 0: none pending.
struct SequenceEnd {
  int stage = -1;
  int keys = 0;
};

template <class Tr>
__device__ __forceinline__ void zero_past_sequence_end(uint8_t* smem, Barriers<Tr>& bar,
                                                       SequenceEnd& end, uint32_t& landed_phases) {
  if (end.stage < 0) return;
  const int lane = int(threadIdx.x) % 32;
  wait_barrier(&bar.v_landed[end.stage], (landed_phases >> end.stage) & 1u);
  landed_phases ^= 1u << end.stage;
  zero_rows<Tr::kPanelsPV, Tr::kBlockN>(smem + Tr::kVOffset + end.stage * Tr::kVBytes, end.keys);
  fence_shared_to_async();
  __syncwarp();
  if (lane == 0) arrive(&bar.v_full[end.stage]);
  end.stage = -1;
}

// The producer: for each tile, Q once its buffer is free, then K and V of
// each visible key block, last to first (a window's blocks below it never),
// into the ring as its stages free up. The ring runs on across tiles, so the
// next tile's first blocks load while this one finishes. Paired, it loads its
// block's half of each K and V block (keys [rank·kBoxRows, +kBoxRows) of it)
// into both blocks' rings. Dense, one thread; packed, warp 0, lane 0 issuing
// the loads and the warp zeroing each sequence's last V block past its end
// once the next block's loads are issued (so that the wait for it to land
// holds nothing up; SequenceEnd).
template <class Tr, bool kLowerEnds, bool kPacked, bool kSplitsTail>
__device__ __forceinline__ void producer(const KernelParams& p, uint8_t* smem, Barriers<Tr>& bar) {
  const bool issues = !kPacked || threadIdx.x == 0;
  const int half_row0 = Tr::kCluster == 1 ? 0 : int(cluster_rank()) * Tr::kBoxRows;
  RingPosition<Tr::kQStages> q{0};
  RingPosition<Tr::kStages> ring{0};
  SequenceEnd pending;
  uint32_t landed_phases = 0;
  for_each_tile<kPacked>(p, [&](int index) {
    const Tile t = tile_at<Tr, kLowerEnds, kPacked, kSplitsTail>(p, index);
    if (t.n_end <= t.n_first) return;  // no Q, no keys: the consumers write 0 and -inf
    const int batch = kPacked ? 0 : t.batch;  // packed, the maps hold one batch index
    // Free once every consumer warp is done with the Q it held before (a fresh
    // barrier counts as free).
    const int qs = q.stage();
    wait_barrier(&bar.q_empty[qs], q.free_parity());
    ++q.it;
    if (issues) {
      expect_bytes(&bar.q_full[qs], Tr::kPanelsQK * Tr::kBlockM * 128);
#pragma unroll
      for (int panel = 0; panel < Tr::kPanelsQK; ++panel)
        tma_load(smem + Tr::kQOffset + qs * Tr::kQBytes + panel * Tr::kBlockM * 128, &p.q,
                 64 * panel, t.q_row0 + t.row0, t.head_q, batch, &bar.q_full[qs]);
    }
    for (int n_block = t.n_end - 1; n_block >= t.n_first; --n_block, ++ring.it) {
      // K's kPanelsQK or V's kPanelsPV panels of a block at ring slot offset +
      // stage · block_bytes (the slot's size).
      const auto load = [&](const CUtensorMap* map, auto panels, uint32_t block_bytes,
                            uint32_t offset, uint64_t* full, uint64_t* empty) {
        wait_barrier(empty, ring.free_parity());
        if (!issues) return;
        expect_bytes(full, decltype(panels)::value * Tr::kBlockN * 128);
        uint8_t* dst = smem + offset + ring.stage() * block_bytes + half_row0 * 128;
        const int row = t.k_row0 + n_block * Tr::kBlockN + half_row0;
#pragma unroll
        for (int panel = 0; panel < decltype(panels)::value; ++panel) {
          if constexpr (Tr::kCluster == 1)
            tma_load(dst + panel * Tr::kBlockN * 128, map, 64 * panel, row, t.head_kv, batch, full);
          else
            tma_load_multicast(dst + panel * Tr::kBlockN * 128, map, 64 * panel, row, t.head_kv,
                               batch, full, (1u << Tr::kCluster) - 1);
        }
      };
      const int stage = ring.stage();
      const bool past_end = kPacked && (n_block + 1) * Tr::kBlockN > t.seqlen_k;
      load(&p.k, std::integral_constant<int, Tr::kPanelsQK>{}, Tr::kKBytes, Tr::kKOffset,
           &bar.k_full[stage], &bar.k_empty[stage]);
      load(&p.v, std::integral_constant<int, Tr::kPanelsPV>{}, Tr::kVBytes, Tr::kVOffset,
           past_end ? &bar.v_landed[stage] : &bar.v_full[stage], &bar.v_empty[stage]);
      if constexpr (kPacked) {
        zero_past_sequence_end(smem, bar, pending, landed_phases);
        if (past_end) pending = {stage, t.seqlen_k - n_block * Tr::kBlockN};
      }
    }
  });
  if constexpr (kPacked) zero_past_sequence_end(smem, bar, pending, landed_phases);
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

}  // namespace flashattn::cuda::sm90
