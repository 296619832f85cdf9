// Tile sizes and the shared-memory layout of the Hopper forward, per head-dim
// bucket. A block has one producer warpgroup and kConsumers consumer
// warpgroups of 64 query rows each (wgmma's M), so kBlockM = 64 · kConsumers.
// Q and K are kHeadDim columns wide and V and the output kHeadDimV (v's own
// bucket, where it is narrower: multi-head latent attention's 192 and 128).
// Above 256 columns (kSplitColumns) the two consumers share one 64-row tile
// and split its columns instead: each multiplies its share of Q's and K's
// columns into a partial S, the shares are added through shared memory (the
// exchange), and each computes P·V for its share of V and the output; see
// mainloop.cuh.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90 {

template <int kHeadDim_, int kBlockN_, int kStages_, int kConsumers_, bool kPersistent_ = false,
          int kCluster_ = 1, int kHeadDimV_ = kHeadDim_, int kHeadDimQK_ = kHeadDim_,
          bool kRowSumsByMma_ = false, int kHeadDimPV_ = kHeadDimV_>
struct Traits {
  static constexpr int kHeadDim = kHeadDim_;  // head_dim padded with zeros to a multiple of 64
  static constexpr int kHeadDimV = kHeadDimV_;  // head_dim_v, likewise: V's and the output's tiles
  // Q·Kᵀ's depth: the columns of Q and K that may be nonzero, a multiple of 16
  // (wgmma's K); the bucket's columns past it are TMA's zeros, so the product
  // skips them (forward.cu lists the depths each bucket has).
  static constexpr int kHeadDimQK = kHeadDimQK_;
  // P·V's width likewise: the columns of V and the output that may be nonzero
  // (a multiple of 32); the rest of the output's are past v's head_dim and are
  // never stored. Below kHeadDimV at the 384 bucket's widths 288 and 320 alone.
  static constexpr int kHeadDimPV = kHeadDimPV_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;    // K/V ring depth
  static constexpr int kConsumers = kConsumers_;
  // Persistent: a block per SM walks the query tiles, with two Q buffers and
  // the output staged in its own buffer, so the next tile's Q loads while this
  // tile runs and its first products follow this tile's last without a gap.
  // Otherwise a block per tile, its output staged in Q's buffer.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kQStages = kPersistent ? 2 : 1;
  // Paired (kCluster = 2): the two blocks of a cluster run neighbouring query
  // tiles of one head, which visit the same key blocks; each block's producer
  // loads half of every K and V block (kBoxRows keys) and the TMA multicast
  // writes it into both blocks' rings, so K and V cross from L2 once per two
  // tiles. A ring slot is then free once the consumers of both blocks have
  // released it.
  static constexpr int kCluster = kCluster_;
  static constexpr int kBoxRows = kBlockN / kCluster;
  // Arrivals that free a Q buffer (every consumer warp) and a K or V slot.
  static constexpr int kQReleases = 4 * kConsumers;
  static constexpr int kSlotReleases = kCluster * kQReleases;
  // Split by columns: wgmma's N (the P·V width) stops at 256, and 64 rows ×
  // 512 fp32 accumulators would need 256 registers a thread.
  static constexpr bool kSplitColumns = kHeadDim > 256;
  static constexpr int kRowGroups = kSplitColumns ? 1 : kConsumers;  // 64-row groups of a tile
  static constexpr int kBlockM = 64 * kRowGroups;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // The first consumer's output columns (its accumulators, from column 0) and
  // Q·Kᵀ depth (from column 0); split by columns, the second consumer's are
  // the rest of each (ConsumerPart). V is wgmma's B operand N-major, in 64-column
  // swizzle panels, so the second consumer's columns must start on a panel:
  // the first takes the whole panels of half the width, and the depth is split
  // so that both issue as many product columns a key (its P·V columns plus its
  // Q·Kᵀ depth). At 288: P·V 128 and 160, Q·Kᵀ 160 and 128 deep, 288 columns
  // each where halves of the 384 bucket issued 336 (docs/perf/cuda_wgmma.md, v4.37).
  static constexpr int kFirstAccCols = kSplitColumns ? kHeadDimPV / 2 / 64 * 64 : kHeadDimPV;
  static constexpr int kFirstDepth =
      kSplitColumns ? (kHeadDimQK + kHeadDimPV - 2 * kFirstAccCols) / 2 / 16 * 16 : kHeadDimQK;
  // The rows' sums l by the tensor cores: with each P·V step one more wgmma,
  // P times a 16 × 8 tile of ones (m64n8k16), whose 8 columns each hold the
  // rows' sums, added in fp32 and rescaled with acc; in place of the softmax's
  // additions (64 FADD a thread per 128 keys) and the epilogue's shuffles.
  // The sums are then of P rounded to fp16, whatever T: bf16's 8 bits would
  // move the lse by up to 1e-3 where a row's probabilities round alike
  // (near-uniform rows), fp16's 11 by at most 2.4e-4. For short tiles, where a
  // tile's time follows its instruction count and the tensor cores wait
  // (docs/perf/cuda_wgmma.md, v4.31); the plain kernels only (dropout sums
  // the probabilities it then drops).
  static constexpr bool kRowSumsByMma = kRowSumsByMma_;
  // The panels that hold Q·Kᵀ's depth and P·V's width: the producer loads only
  // those (the rest would be TMA's zeros that no product reads).
  static constexpr int kPanelsQK = (kHeadDimQK + 63) / 64;
  static constexpr int kPanelsPV = (kHeadDimPV + 63) / 64;

  // setmaxnreg: the producer keeps 24 registers and the consumers share the
  // rest of the 64K register file: 128·24 + 256·240 = 64512 with two consumer
  // warpgroups, 128·24 + 384·160 = 64512 with three. With one, 256 threads
  // may hold 255 registers each from the launch on, and nothing is moved.
  static constexpr bool kMovesRegisters = kConsumers > 1;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * 2;
  static constexpr uint32_t kOBytes = kBlockM * kHeadDimV * 2;
  static constexpr uint32_t kKBytes = kBlockN * kHeadDim * 2;  // a K block
  static constexpr uint32_t kVBytes = kBlockN * kHeadDimV * 2;  // a V block
  // Byte offsets from the 1024-aligned base: the Q buffers, the output staging
  // (Q's buffer unless persistent), the K ring, the V ring, then the mbarriers.
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kOOffset = kPersistent ? kQStages * kQBytes : kQOffset;
  static constexpr uint32_t kKOffset = kPersistent ? kOOffset + kOBytes : kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKBytes;
  // Split, the partial scores: [block parity][consumer] 64 × kBlockN fp32,
  // two parities so that one barrier per key block orders the exchange.
  static constexpr uint32_t kExchangeOffset = kVOffset + kStages * kVBytes;
  static constexpr uint32_t kExchangeBytes = kSplitColumns ? 2 * 2 * 64 * kBlockN * 4 : 0;
  // kRowSumsByMma: the ones, a wgmma B operand of 16 rows (two 1024-byte
  // swizzle periods), set once per block.
  static constexpr uint32_t kOnesOffset = kExchangeOffset + kExchangeBytes;
  static constexpr uint32_t kOnesBytes = kRowSumsByMma ? 2048 : 0;
  static constexpr uint32_t kBarrierOffset = kOnesOffset + kOnesBytes;
  static constexpr uint32_t kBarrierBytes = 8 * (2 * kQStages + 5 * kStages);
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;  // + base alignment

  static_assert(kConsumers >= 1 && kConsumers <= 3, "register split defined for 1 to 3");
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0, "whole 64-column panels");
  static_assert(kHeadDimQK % 16 == 0 && kHeadDimQK <= kHeadDim, "whole wgmma K steps");
  static_assert(kHeadDimPV % 32 == 0 && kHeadDimPV <= kHeadDimV, "P·V within v's bucket");
  static_assert(kFirstAccCols <= 256 && kHeadDimPV - kFirstAccCols <= 256,
                "wgmma N (a consumer's P·V width) is at most 256");
  static_assert(!kSplitColumns || (kConsumers == 2 && !kPersistent && kHeadDimV == kHeadDim &&
                                   kFirstAccCols % 64 == 0 && kFirstDepth % 16 == 0 &&
                                   kFirstDepth > 0 && kFirstDepth < kHeadDimQK),
                "split by columns: two consumers, per tile, the second's V from a panel's "
                "start, whole wgmma K steps of the depth each");
  static_assert(kSplitColumns || kHeadDimPV == kHeadDimV, "P·V cut at the split buckets alone");
  static_assert(kPersistent || kHeadDimV <= kHeadDim, "the output is staged in Q's buffer");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "kBlockN is the Q·Kᵀ wgmma N");
  static_assert(kCluster == 1 || kCluster == 2, "tiles run alone or in pairs");
  static_assert(kBoxRows % 8 == 0, "a half block starts on a 1024-byte swizzle period");
  static_assert(kSmemBytes <= 232448, "beyond the 227 KB a Hopper block may opt into");
  static_assert(!kRowSumsByMma || (!kSplitColumns && kOnesOffset % 1024 == 0),
                "row sums by wgmma: consumers of whole rows, the ones on a swizzle period");
};

// Per bucket, measured on the H100 (docs/perf/cuda_wgmma.md §v4). kBlockN: at 128,
// 192 and 256 the largest whose 2-stage K and V ring beside Q fits shared
// memory (208, 216 and 224 KB; FlashAttention-3's choices), 2–6% faster than
// 128, 96 and 64 at 16K tokens; at 64, 128, because 192 wastes an eighth of a
// 1024-key sequence on a ragged last block. Consumers: three at d = 64, where
// the softmax is as long as the products and a third warpgroup gives it more
// products to hide under (+11–16% from 2048 keys, −5 to −7% causal at 512–1024);
// two elsewhere, where three would not hold O, S and P in 160 registers.
template <int kHeadDim>
struct TraitsFor;
// Persistent tiles where they exist (d 64 and 128, BN 128 to make room for the
// output buffer); see launch.cuh for when they run.
template <int kHeadDim>
struct PersistentTraitsFor {
  using type = void;
};
template <> struct TraitsFor<64> { using type = Traits<64, 128, 2, 3>; };
template <> struct TraitsFor<128> { using type = Traits<128, 176, 2, 2>; };
template <> struct TraitsFor<192> { using type = Traits<192, 112, 2, 2>; };
template <> struct TraitsFor<256> { using type = Traits<256, 80, 2, 2>; };
// Split by columns (kSplitColumns): 64 query rows, BN 32, whose 2-stage K and V
// ring beside Q and the exchange fills 176 KB (384) and 224 KB (512).
template <> struct TraitsFor<384> { using type = Traits<384, 32, 2, 2>; };
template <> struct TraitsFor<512> { using type = Traits<512, 32, 2, 2>; };

template <> struct PersistentTraitsFor<64> { using type = Traits<64, 128, 2, 3, true>; };
template <> struct PersistentTraitsFor<128> { using type = Traits<128, 128, 2, 2, true>; };

// Persistent tiles of 128 query rows (two consumers) at d 64, for short keys
// (at most two key blocks a tile; launch.cuh's walks_few_key_blocks), with the
// row sums on the tensor cores (kRowSumsByMma) and a 4-stage ring, so that the
// producer runs two tiles ahead (+2.3% at GPT-2-medium's 256 causal keys over 2
// stages, docs/perf/cuda_wgmma.md v4.31).
template <int kHeadDim>
struct ShortTraitsFor {
  using type = void;
};
template <> struct ShortTraitsFor<64> {
  using type = Traits<64, 128, 4, 2, true, 1, 64, 64, true>;
};

// The kernels that take every variant (core/variant.h): the score step runs on
// every block there, and with the plain shapes at d 64 (three consumers, 160
// registers), d 128 (BN 176) and d 256 (BN 80) ptxas spilled 56–204 bytes a
// thread; these shapes do not. Per-tile, not persistent or paired, to keep the
// instantiations to one per (dtype, head dim).
template <int kHeadDim>
struct VariantTraitsFor;
template <> struct VariantTraitsFor<64> { using type = Traits<64, 128, 2, 2>; };
template <> struct VariantTraitsFor<128> { using type = Traits<128, 128, 2, 2>; };
template <> struct VariantTraitsFor<192> { using type = Traits<192, 112, 2, 2>; };
template <> struct VariantTraitsFor<256> { using type = Traits<256, 64, 2, 2>; };
template <> struct VariantTraitsFor<384> { using type = Traits<384, 32, 2, 2>; };
template <> struct VariantTraitsFor<512> { using type = Traits<512, 32, 2, 2>; };

// Persistent tiles in pairs (kCluster) where they can: at d 128, +0–5% at
// 1024 and 2048 keys on the H100. At d 64 they lose (−2 to −4% at 1024 keys),
// and so do per-tile blocks in pairs at d 128 and 256 (−3 to −8% from 4096
// keys; docs/perf/cuda_wgmma.md, v4.12).
template <int kHeadDim>
struct PairedTraitsFor {
  using type = void;
};
template <> struct PairedTraitsFor<128> { using type = Traits<128, 128, 2, 2, true, 2>; };

// One consumer's 64-row tiles at d 192 and 256, for grids whose 64-row tiles
// fit in one wave (launch.cuh's fits_one_wave): there the 128-row tiles leave
// SMs idle while each runs two warpgroups' products on one SM's tensor cores,
// so halving a tile halves the time its SM spends on it. The consumer's
// softmax runs under its own P·V, without turns. BN 128 at 192 (Q 24 KB and a
// 2-stage ring of 48 KB K and V blocks: 216 KB), 96 at 256 (224 KB). On the
// H200 (docs/perf/cuda_wgmma.md, v4.32): SD-1.5's d 160 layer (2 × 8 heads ×
// 256 tokens, 32 tiles of 128 rows on 132 SMs) 1.34× faster, Gemma 3's d 256
// at a 500-token prompt 1.09×.
template <int kHeadDim>
struct OneWaveTraitsFor {
  using type = void;
};
template <> struct OneWaveTraitsFor<192> { using type = Traits<192, 128, 2, 1>; };
template <> struct OneWaveTraitsFor<256> { using type = Traits<256, 96, 2, 1>; };

// Tr with Q·Kᵀ's depth cut to kHeadDimQK (void stays void): where q's head_dim
// is well below its bucket's width (40 in the 64 bucket, 72–96 in the 128, 160
// in the 192, 288 and 320 in the 384), the products of the zero columns are
// skipped; the ring and, but for the split buckets, the P·V product stay the
// bucket's (forward.cu's run_bucket picks the depth). Split by columns, P·V is
// cut to the same width (forward.cu sends there only heads whose q and v head
// dims are both within it), so that the consumers' uneven shares save
// products (Traits::kFirstAccCols).
template <class Tr, int kHeadDimQK>
struct ScoresDepth {
  using type = Traits<Tr::kHeadDim, Tr::kBlockN, Tr::kStages, Tr::kConsumers, Tr::kPersistent,
                      Tr::kCluster, Tr::kHeadDimV, kHeadDimQK, Tr::kRowSumsByMma,
                      Tr::kSplitColumns ? kHeadDimQK : Tr::kHeadDimV>;
};
template <int kHeadDimQK>
struct ScoresDepth<void, kHeadDimQK> {
  using type = void;
};

// A V narrower than Q and K (run_forward's kHeadDimV): the P·V product, the
// output accumulators, V's ring and the epilogue at v's bucket, so that
// multi-head latent attention's 192 and 128 do the work of 192 + 128 columns
// per key, not 2 · 192. At 192/128, BN 128: Q 48 KB beside a 2-stage ring of
// 48 KB K and 32 KB V blocks fills 208 KB; consumers hold 64 accumulators, 64
// scores and 32 probability registers (at 192/192, BN 112: 96, 56 and 28).
// Plain attention only; a variant, dropout or a bias runs at the wider bucket.
template <int kHeadDim, int kHeadDimV>
struct NarrowValueTraitsFor {
  using type = void;
};
template <> struct NarrowValueTraitsFor<192, 128> {
  using type = Traits<192, 128, 2, 2, false, 1, 128>;
};

}  // namespace flashattn::cuda::sm90
