// The load side of the Hopper forward's mainloop: the mbarriers of the ring and
// the producer thread that fills it with TMA loads of Q, K and V.
#pragma once

#include <cstdint>

#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"

namespace flashattn::cuda::sm90 {

template <class Tr>
struct Barriers {
  uint64_t q_full[Tr::kQStages], q_empty[Tr::kQStages];
  uint64_t k_full[Tr::kStages], k_empty[Tr::kStages];
  uint64_t v_full[Tr::kStages], v_empty[Tr::kStages];
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

// The producer thread: for each tile, Q once its buffer is free, then K and V
// of each visible key block, last to first (a window's blocks below it never), into the ring as its stages free
// up. The ring runs on across tiles, so the next tile's first blocks load
// while this one finishes. Paired, it loads its block's half of each K and V
// block (keys [rank·kBoxRows, +kBoxRows) of it) into both blocks' rings.
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ void producer(const KernelParams& p, uint8_t* smem, Barriers<Tr>& bar) {
  const int half_row0 = Tr::kCluster == 1 ? 0 : int(cluster_rank()) * Tr::kBoxRows;
  RingPosition<Tr::kQStages> q{0};
  RingPosition<Tr::kStages> ring{0};
  for_each_tile(p, [&](int index) {
    const Tile t = tile_at<Tr, kLowerEnds>(p, index);
    if (t.n_end <= t.n_first) return;  // no Q, no keys: the consumers write 0 and -inf
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
    for (int n_block = t.n_end - 1; n_block >= t.n_first; --n_block, ++ring.it) {
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

}  // namespace flashattn::cuda::sm90
