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
// no faster (docs/perf/cuda_wgmma.md, v4.9). P stays in registers: the accumulator
// layout of S, packed to 16 bits, is wgmma's A-fragment layout.
// Key blocks that need masking (the causal diagonal, the ragged end of
// seqlen_k) come first; blocks above the diagonal are never loaded.
// Persistent d-128 tiles may run in pairs, two blocks of a cluster sharing
// each K and V load (Traits::kCluster).
// Head dims above 256 (Traits::kSplitColumns): the two consumers share one
// 64-row tile, each multiplying its share of Q's and K's columns and owning
// its share of V's and the output's; their partial scores are added through
// shared memory before the softmax, which both compute alike.
// kPacked: a packed batch (core/seqlen.h), each tile in its sequence's rows
// and keys, taken from a list of the tiles with rows, heaviest first
// (scheduler.cuh's tile_at, order_packed_tiles_kernel); the producer's warp then also zeroes
// the keys past a sequence's end in its last V block (producer.cuh), and the
// epilogue stores the rows up to the sequence's end.
#pragma once

#include <cstdint>

#include "cuda/sm90/mainloop.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/traits.h"

namespace flashattn::cuda::sm90 {

template <typename T, class Tr, class Variant, bool kPacked>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    forward_kernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Packed, a block per tile: the grid is sized by the longest sequence, and
  // the blocks past the list of tiles with rows leave before they set anything up.
  if constexpr (kPacked && !Tr::kPersistent) {
    if (int(blockIdx.x) >= tile_count<true>(p)) return;
  }
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
      if constexpr (kPacked) ::cuda::ptx::mbarrier_init(&bar.v_landed[stage], 1);
    }
    ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
  }
  if constexpr (Tr::kRowSumsByMma) {  // the row sums' ones, 16 bytes a producer thread
    static_assert(Tr::kOnesBytes == 16 * 128, "one chunk per thread of the producer warpgroup");
    if (threadIdx.x < 128) {
      const uint32_t ones = pack_pair<__half>(1.0f, 1.0f);  // the sums are fp16 products
      *reinterpret_cast<uint4*>(smem + Tr::kOnesOffset + 16 * threadIdx.x) =
          make_uint4(ones, ones, ones, ones);
      fence_shared_to_async();  // the consumers' wgmma read them (after the sync below)
    }
  }
  // Paired, the other block's loads and releases reach these barriers.
  if constexpr (Tr::kCluster == 1) __syncthreads();
  else cluster_sync();

  if (warpgroup == 0) {
    if constexpr (Tr::kMovesRegisters) release_registers<Tr::kProducerRegisters>();
    if (kPacked ? threadIdx.x < 32 : threadIdx.x == 0)
      producer<Tr, Variant::kLowerEnds, kPacked, kSplitsTail<Tr, Variant, kPacked>>(p, smem, bar);
  } else {
    if constexpr (Tr::kMovesRegisters) claim_registers<Tr::kConsumerRegisters>();
    // Consumers whose column shares differ in size each run their own code.
    if constexpr (kUnevenShares<Tr>) {
      if (warpgroup == 1) consumer<T, Tr, Variant, kPacked, 0>(p, smem, bar, 0);
      else consumer<T, Tr, Variant, kPacked, 1>(p, smem, bar, 1);
    } else {
      consumer<T, Tr, Variant, kPacked, 0>(p, smem, bar, warpgroup - 1);
    }
  }
#endif
}

}  // namespace flashattn::cuda::sm90
