// The block shape of the 16-bit tensor-core backward: a block of 8 warps owns
// kBlockN keys of one (batch, kv head) and walks the query tiles of kBlockM rows
// that see them. Its five products each split the block's output over the 8
// warps in their own way (warps along the output's rows × along its columns):
//   S = Q·Kᵀ and dP = dO·Vᵀ   kBlockM × kBlockN   kSWarpsM × (8 / kSWarpsM)
//   dV += Pᵀ·dO, dK += dSᵀ·Q  kBlockN × kD        kKVWarpsN × (8 / kKVWarpsN)
//   dQ = dS·K                 kBlockM × kD        kQWarpsM × (8 / kQWarpsM), in
//                                                  kQPasses passes over its columns
// P and dS reach the last three through shared memory as 16-bit tiles
// (rows: queries, columns: keys). Q and dO tiles have kQStages buffers: two let
// query tile i + 1 load while tile i is computed; at d = 512 shared memory holds
// only one of each, and the kernel reloads each as soon as its last product is
// done (backward_kernel.cuh).
#pragma once

#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::mma {

// Whether a warp's share of a tile's columns, `width` columns at multiples of
// `width`, suits SmemTile::lane_at: a power of two inside one 64-column panel
// (or the 32-column one), or whole panels.
constexpr bool lane_at_width(int width, int tile_cols) {
  const bool power_of_two = width > 0 && (width & (width - 1)) == 0;
  return tile_cols % 64 == 0 ? (power_of_two && width <= 64) || width % 64 == 0
                             : power_of_two && width <= 32;
}

template <int kD_, int kBlockM_, int kBlockN_, int kSWarpsM_, int kKVWarpsN_, int kQWarpsM_,
          int kQPasses_, int kQStages_ = 2>
struct BackwardShape {
  static constexpr int kD = kD_;  // head_dim padded with zeros
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;

  // S and dP: a warp's kSRows × kSCols.
  static constexpr int kSWarpsM = kSWarpsM_, kSWarpsN = kWarps / kSWarpsM;
  static constexpr int kSRows = kBlockM / kSWarpsM, kSCols = kBlockN / kSWarpsN;
  static constexpr int kSMTiles = kSRows / 16, kSNTiles = kSCols / 8;
  // dK and dV: a warp's kKVRows keys × kKVCols columns.
  static constexpr int kKVWarpsN = kKVWarpsN_, kKVWarpsD = kWarps / kKVWarpsN;
  static constexpr int kKVRows = kBlockN / kKVWarpsN, kKVCols = kD / kKVWarpsD;
  static constexpr int kKVMTiles = kKVRows / 16, kKVNTiles = kKVCols / 8;
  // dQ: a warp's kQRows rows × kQCols columns per pass.
  static constexpr int kQWarpsM = kQWarpsM_, kQWarpsD = kWarps / kQWarpsM;
  static constexpr int kQPasses = kQPasses_;
  static constexpr int kQRows = kBlockM / kQWarpsM, kQCols = kD / kQWarpsD / kQPasses;
  static constexpr int kQMTiles = kQRows / 16, kQNTiles = kQCols / 8;

  static constexpr int kQStages = kQStages_;
  // Whether warps skip dV, dK and dQ columns that are all padding: in the 512
  // bucket, which runs head_dim 257–512, up to half the columns are (the
  // narrower buckets keep their loops free of the test).
  static constexpr bool kSkipsPadding = kD > 256;

  using QTile = SmemTile<kBlockM, kD>;   // Q and dO, kQStages each
  using KTile = SmemTile<kBlockN, kD>;   // K and V; dK and dV at the end
  using PTile = SmemTile<kBlockM, kBlockN>;  // P and dS
  // Shared memory: K, V, Q[kQStages], dO[kQStages], P, dS, then lse and D (fp32)
  // [kQStages].
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + KTile::kBytes;
  static constexpr int kQOffset = kVOffset + KTile::kBytes;
  static constexpr int kDOutOffset = kQOffset + kQStages * QTile::kBytes;
  static constexpr int kPOffset = kDOutOffset + kQStages * QTile::kBytes;
  static constexpr int kDSOffset = kPOffset + PTile::kBytes;
  static constexpr int kLseOffset = kDSOffset + PTile::kBytes;
  static constexpr int kRowDotOffset = kLseOffset + kQStages * kBlockM * 4;
  static constexpr int kSmemBytes = kRowDotOffset + kQStages * kBlockM * 4;

  static_assert(kSRows % 16 == 0 && kSCols % 16 == 0, "S: m16 slices, n8 pairs");
  static_assert(kKVRows % 16 == 0 && kKVCols % 16 == 0, "dK, dV: m16 slices, n8 pairs");
  static_assert(kQRows % 16 == 0 && kQCols % 16 == 0, "dQ: m16 slices, n8 pairs");
  static_assert(lane_at_width(kKVRows, kBlockN), "Pᵀ and dSᵀ: warp's keys along P's columns");
  static_assert(lane_at_width(kKVCols, kD), "dO and Q as B of dV, dK");
  static_assert(lane_at_width(kQCols, kD), "K as B of dQ");
  static_assert(kBlockM <= kThreads, "a thread per row loads lse and D");
  static_assert(kQStages == 1 || kQStages == 2, "one or two Q and dO buffers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block on sm_90");
};

}  // namespace flashattn::cuda::mma
