// Tile sizes and the shared-memory layout of the Hopper backward, per head-dim
// bucket. A block owns kBlockN keys of one (batch, kv head) with two consumer
// warpgroups and one producer warpgroup (a warp loading, a warp adding dQ), and
// walks query tiles of kBlockM rows. Keys are wgmma's M in the consumers'
// products (Sᵀ and dPᵀ come out with keys as rows, and Pᵀ and dSᵀ feed dV and
// dK straight from registers). The two consumers split the work one of two ways:
//   by keys (head dim ≤ 128): kBlockN = 128, each consumer 64 keys, all their
//     columns of dK and dV, all query rows of Sᵀ;
//   by columns (head dim 256, where 64 keys' dK and dV of all columns would
//     take 256 registers a thread): kBlockN = 64, both consumers the same keys,
//     each half the columns of dK and dV and half the query rows of Sᵀ and dPᵀ.
//     Each writes its half of Pᵀ and dSᵀ to shared memory, and takes the other
//     half from there for dV's and dK's products.
// Each consumer computes half of a step's dQ.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90 {

// kDQStages: the dQ buffers the dQ warp adds from; 0 where shared memory holds
// none (head dim 256), and a step's dQ goes into its own Q/dO stage once both
// consumers are done reading it (64 rows of fp32 dQ are the bytes of 64 rows of
// 16-bit Q and dO).
//
// kHeadDimQK and kHeadDimV (multiples of 16, at most the bucket) let a kernel
// skip products on the bucket's zero columns where q's and k's head_dim, or
// v's, is narrower: Sᵀ is kHeadDimQK deep and dPᵀ kHeadDimV deep, and dV's
// product and V's and dO's loads cover v's columns rounded up to whole panels
// a consumer. The tiles keep the bucket's layout.
template <int kHeadDim_, int kBlockM_, int kQStages_, int kDQStages_, int kHeadDimV_ = kHeadDim_,
          int kHeadDimQK_ = kHeadDim_>
struct BackwardTraits {
  static constexpr int kHeadDim = kHeadDim_;  // head_dim padded with zeros to the bucket
  static constexpr int kHeadDimQK = kHeadDimQK_;  // Sᵀ's depth
  static constexpr int kHeadDimV = kHeadDimV_;    // dPᵀ's depth
  static constexpr int kBlockM = kBlockM_;    // query rows per step
  static constexpr bool kSplitsColumns = kHeadDim > 128;
  static constexpr int kBlockN = kSplitsColumns ? 64 : 128;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kQStages = kQStages_;  // Q, dO, lse and D stages
  static constexpr int kDQStages = kDQStages_;
  static constexpr bool kDQInStage = kDQStages == 0;
  static constexpr int kPanels = kHeadDim / 64;  // 64-column, 128-byte-row panels
  // A consumer's query rows of Sᵀ and dPᵀ (their wgmma N) and its columns of
  // dK and dV.
  static constexpr int kScoreRows = kSplitsColumns ? kBlockM / 2 : kBlockM;
  static constexpr int kKVCols = kSplitsColumns ? kHeadDim / 2 : kHeadDim;
  // A consumer's columns of dV, and the 64-column panels of V and dO loaded
  // (those dV's product reads; the rest of their tiles is never read).
  static constexpr int kVCols =
      kSplitsColumns ? (kHeadDimV + 127) / 128 * 64 : (kHeadDimV + 63) / 64 * 64;
  static constexpr int kPanelsV = (kSplitsColumns ? 2 * kVCols : kVCols) / 64;
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
  // the other lanes' reads unordered with the producer's next writes); and
  // where dQ goes into the stage, the dQ warp once its reduction read it out.
  static constexpr int kStageReleases = 128 * kConsumers + (kDQInStage ? 1 : 0);
  // Threads meeting at a dQ buffer's barriers: the consumers and the dQ warp.
  static constexpr int kDQMeeting = 128 * kConsumers + 32;

  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 2;
  // The bytes of V's and dO's loaded panels.
  static constexpr uint32_t kVLoadBytes = kBlockN * kPanelsV * 64 * 2;
  static constexpr uint32_t kDOutLoadBytes = kBlockM * kPanelsV * 64 * 2;
  static constexpr uint32_t kStageBytes = 2 * kQBytes;  // Q, then dO
  static constexpr uint32_t kDSBytes = kBlockN * kBlockM * 2;  // dSᵀ: keys × query rows
  // dQ's columns in the sums and the dQ buffers: q's and k's, rounded up to a
  // panel (past them dS·K adds only K's zero columns).
  static constexpr int kDQWidth = (kHeadDimQK + 63) / 64 * 64;
  static constexpr uint32_t kDQBytes = kBlockM * kDQWidth * 4;  // a step's fp32 dQ
  // Byte offsets from the 1024-aligned base: K, V, the stages (each Q then dO),
  // two dSᵀ buffers (a step writes one while the other warpgroup may still
  // read the last step's) and, split by columns, two Pᵀ buffers likewise, the
  // lse·log2(e) and D stages, the dQ buffers, each a step's dQ in the layout
  // of the fp32 sums (common/dq_accum.cuh), then the mbarriers.
  static constexpr uint32_t kKOffset = 0;
  static constexpr uint32_t kVOffset = kKVBytes;
  static constexpr uint32_t kStageOffset = 2 * kKVBytes;
  // A stage's Q and dO tiles.
  static constexpr uint32_t q_offset(int stage) { return kStageOffset + stage * kStageBytes; }
  static constexpr uint32_t dout_offset(int stage) { return q_offset(stage) + kQBytes; }
  static constexpr uint32_t kDSOffset = kStageOffset + kQStages * kStageBytes;
  static constexpr uint32_t kPTOffset = kDSOffset + 2 * kDSBytes;
  static constexpr uint32_t kLseOffset = kPTOffset + (kSplitsColumns ? 2 * kDSBytes : 0);
  static constexpr uint32_t kRowDotOffset = kLseOffset + kQStages * kBlockM * 4;
  static constexpr uint32_t kDQOffset = kRowDotOffset + kQStages * kBlockM * 4;
  static constexpr uint32_t kBarrierOffset = kDQOffset + kDQStages * kDQBytes;
  // Where step's dQ goes: its buffer (or stage) and that one's bytes.
  static constexpr int dq_buffer(int step) { return kDQInStage ? step % kQStages : step % kDQStages; }
  static constexpr uint32_t dq_offset(int step) {
    return kDQInStage ? q_offset(step % kQStages) : kDQOffset + dq_buffer(step) * kDQBytes;
  }
  static constexpr uint32_t kBarrierBytes = 8 * (2 + 4 * kQStages);
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;  // + base alignment

  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "64-column panels; wgmma N at most 256");
  static_assert(kHeadDimQK % 16 == 0 && kHeadDimQK <= kHeadDim && kHeadDimV % 16 == 0 &&
                    kHeadDimV <= kHeadDim,
                "whole wgmma K steps within the bucket");
  static_assert(kBlockM == 64 || kBlockM == 128, "dQ in one or two 64-row products");
  static_assert(kDQCols % 64 == 0 && kKVCols % 64 == 0 && kVCols % 64 == 0,
                "a consumer's dQ, dK and dV columns are whole 64-column panels");
  static_assert(!kSplitsColumns || kBlockM == 64, "split by columns: Pᵀ and dSᵀ one panel wide");
  static_assert(!kDQInStage || kDQBytes <= kStageBytes, "dQ fits its stage");
  static_assert(kSmemBytes <= 232448, "beyond the 227 KB a Hopper block may opt into");
};

// Per bucket: at d = 64 query tiles of 128 rows (the per-step costs, barriers
// and the stats, over twice the products); at 128 and 256, 64 rows, so that
// dK, dV, Sᵀ and dPᵀ (64 + 64 + 32 + 32 fp32 registers a thread at 128, 64 +
// 64 + 16 + 16 at 256) fit in 240. Two Q/dO stages; two dQ buffers where
// shared memory holds them (d = 128: 226 KB of 227); at 256 none (K, V and
// two stages take 192 KB).
template <int kHeadDim>
struct BackwardTraitsFor;
template <> struct BackwardTraitsFor<64> { using type = BackwardTraits<64, 128, 2, 1>; };
template <> struct BackwardTraitsFor<128> { using type = BackwardTraits<128, 64, 2, 2>; };
template <> struct BackwardTraitsFor<256> { using type = BackwardTraits<256, 64, 2, 0>; };

// The bucket's traits with Sᵀ kHeadDimQK deep and dPᵀ kHeadDimV deep.
template <int kHeadDim, int kHeadDimV, int kHeadDimQK>
struct NarrowBackwardTraits {
  using Base = typename BackwardTraitsFor<kHeadDim>::type;
  using type = BackwardTraits<kHeadDim, Base::kBlockM, Base::kQStages, Base::kDQStages, kHeadDimV,
                              kHeadDimQK>;
};

}  // namespace flashattn::cuda::sm90
