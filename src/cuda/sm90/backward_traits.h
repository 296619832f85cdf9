// Tile sizes and the shared-memory layout of the Hopper backward, per head-dim
// bucket. A block owns kBlockN = 128 keys of one (batch, kv head): two consumer
// warpgroups of 64 keys each (wgmma's M, so that Sᵀ and dPᵀ come out with keys
// as rows and Pᵀ and dSᵀ feed dV and dK straight from registers), and one
// producer warpgroup (a warp loading, a warp adding dQ). It walks query tiles
// of kBlockM rows; each consumer computes half of a step's dQ.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90 {

template <int kHeadDim_, int kBlockM_, int kQStages_, int kDQStages_>
struct BackwardTraits {
  static constexpr int kHeadDim = kHeadDim_;  // head_dim padded with zeros to the bucket
  static constexpr int kBlockM = kBlockM_;    // query rows per step: Sᵀ's wgmma N
  static constexpr int kBlockN = 128;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kQStages = kQStages_;  // Q, dO, lse and D stages
  static constexpr int kDQStages = kDQStages_;  // dQ buffers the dQ warp adds from
  static constexpr int kPanels = kHeadDim / 64;  // 64-column, 128-byte-row panels
  // A consumer's share of a step's dQ (kBlockM × kHeadDim): a 64-row block of
  // all columns where the step has two (kBlockM 128), else half the columns. So
  // both consumers do the same products a step, and dQ's wgmma is 64 × kDQCols.
  static constexpr bool kDQSplitsRows = kBlockM == 128;
  static constexpr int kDQCols = kDQSplitsRows ? kHeadDim : kHeadDim / 2;

  // The producer keeps 24 registers, the consumers 240: 128·24 + 256·240 = 64512.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  // Arrivals that free a Q/dO stage: every consumer thread, each releasing its
  // own reads of the stage's lse2 and D (one per warp left racecheck to see
  // the other lanes' reads unordered with the producer's next writes).
  static constexpr int kStageReleases = 128 * kConsumers;
  // Threads meeting at a dQ buffer's barriers: the consumers and the dQ warp.
  static constexpr int kDQMeeting = 128 * kConsumers + 32;

  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 2;
  static constexpr uint32_t kDSBytes = kBlockN * kBlockM * 2;  // dSᵀ: keys × query rows
  static constexpr uint32_t kDQBytes = kBlockM * kHeadDim * 4;  // a step's fp32 dQ
  // Byte offsets from the 1024-aligned base: K, V, the Q and dO stages, two dSᵀ
  // buffers (a step writes one while the other warpgroup may still read the
  // last step's), the lse·log2(e) and D stages, the dQ buffers, each a step's
  // dQ in the layout of the fp32 sums (common/dq_accum.cuh), then the mbarriers.
  static constexpr uint32_t kKOffset = 0;
  static constexpr uint32_t kVOffset = kKVBytes;
  static constexpr uint32_t kQOffset = 2 * kKVBytes;
  static constexpr uint32_t kDOutOffset = kQOffset + kQStages * kQBytes;
  static constexpr uint32_t kDSOffset = kDOutOffset + kQStages * kQBytes;
  static constexpr uint32_t kLseOffset = kDSOffset + 2 * kDSBytes;
  static constexpr uint32_t kRowDotOffset = kLseOffset + kQStages * kBlockM * 4;
  static constexpr uint32_t kDQOffset = kRowDotOffset + kQStages * kBlockM * 4;
  static constexpr uint32_t kBarrierOffset = kDQOffset + kDQStages * kDQBytes;
  static constexpr uint32_t kBarrierBytes = 8 * (1 + 3 * kQStages);
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;  // + base alignment

  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "64-column panels; wgmma N at most 256");
  static_assert(kBlockM == 64 || kBlockM == 128, "dQ in one or two 64-row products");
  static_assert(kDQCols % 64 == 0, "a consumer's dQ columns are whole 64-column panels of K");
  static_assert(kSmemBytes <= 232448, "beyond the 227 KB a Hopper block may opt into");
};

// Per bucket: at d = 64 query tiles of 128 rows (the per-step costs, barriers
// and the stats, over twice the products); at 128, 64 rows, so that dK, dV,
// Sᵀ and dPᵀ (64 + 64 + 32 + 32 fp32 registers a thread) fit in 240. Two Q/dO
// stages; two dQ buffers where shared memory holds them (d = 128: 226 KB of
// 227), so that the consumers write a step's dQ while the last one is read out.
template <int kHeadDim>
struct BackwardTraitsFor;
template <> struct BackwardTraitsFor<64> { using type = BackwardTraits<64, 128, 2, 1>; };
template <> struct BackwardTraitsFor<128> { using type = BackwardTraits<128, 64, 2, 2>; };

}  // namespace flashattn::cuda::sm90
