// The block shape of the sm_80 tensor-core kernels (mma.sync m16n8k16): rows,
// keys and output columns per block and per warp, and the shared-memory tiles
// that hold them. cuda_mma and cuda_f16x3's narrow kernel share it.
#pragma once

#include "cuda/common/opaque.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashattn::cuda::sm80 {

template <int kD_, int kDV_, int kBlockM_, int kBlockN_, int kWarps_>
struct TileShape {
  static constexpr int kD = kD_;    // Q and K columns: head_dim padded with zeros
  static constexpr int kDV = kDV_;  // output columns per block
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpRows / 16;  // m16 row slices per warp
  static constexpr int kNTiles = kBlockN / 8;     // n8 key columns of S
  static constexpr int kOTiles = kDV / 8;         // n8 output columns
  using QTile = SmemTile<kBlockM, kD>;            // also stages the output
  using KTile = SmemTile<kBlockN, kD>;
  using VTile = SmemTile<kBlockN, kDV>;
  static constexpr int kSmemBytes = QTile::kBytes + KTile::kBytes + VTile::kBytes;
  static constexpr bool kRowSumsShared = kMTiles > 1;  // see RowSums (softmax.cuh)
  // Whether the unmasked blocks with whole tiles run in a loop of their own,
  // free of the per-block checks (docs/perf/cuda_mma.md, v3.7: +1.0 to 2.6% at
  // head dim 256). Not with two m16 slices per warp: those kernels already use
  // 255 registers, and the second loop body spills.
  static constexpr bool kInnerLoop = kMTiles == 1;
  static_assert(kWarpRows % 16 == 0 && kBlockN % 16 == 0 && kDV % 16 == 0 && kDV <= kD);
};

// The calling thread's lane and the first tile row of its warp. Unsigned
// arithmetic: thread_index() hides threadIdx's range, and a signed % 32 costs a
// sign fix-up whose values the d128 key loop then kept live (a register and a
// spill; docs/perf/cuda_mma.md, v3.12).
struct ThreadCoord {
  int lane, warp_row0;
};
template <typename Shape>
__device__ __forceinline__ ThreadCoord thread_coord() {
  const unsigned tid = unsigned(thread_index());
  return {int(tid % 32), int(tid / 32) * Shape::kWarpRows};
}

}  // namespace flashattn::cuda::sm80
