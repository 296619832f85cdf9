// Tile shapes per head-dim bucket and the launch of one instantiation of the
// 16-bit tensor-core forward. Each (dtype, bucket) pair is compiled in its own
// file under inst/, so the instantiations build in parallel.
#pragma once

#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/sm80/mma/forward.h"
#include "cuda/sm80/mma/forward_kernel.cuh"

namespace flashattn::cuda::mma {

using sm80::TileShape;

// BM × BN and warps after FlashAttention-2's choices: 4 warps of 32 rows up to
// d = 128 (two m16 slices per warp halve the K and V shared-memory reads per
// product); at 192, 8 warps of 16 rows, where 32 rows of fp32 accumulators would
// not fit in registers; at 256, 64 × 64 with 4 warps, whose 96 KB of shared memory
// let two blocks share an H100 SM. Above 256 a block computes a 256-column slice
// of the output over 64 rows (correct, not tuned). Measurements: docs/perf/cuda_mma.md.
template <int kHeadDim>
struct ShapeFor;
template <> struct ShapeFor<32> { using type = TileShape<32, 32, 128, 128, 4>; };
template <> struct ShapeFor<64> { using type = TileShape<64, 64, 128, 128, 4>; };
template <> struct ShapeFor<96> { using type = TileShape<96, 96, 128, 64, 4>; };
template <> struct ShapeFor<128> { using type = TileShape<128, 128, 128, 64, 4>; };
template <> struct ShapeFor<192> { using type = TileShape<192, 192, 128, 64, 8>; };
template <> struct ShapeFor<256> { using type = TileShape<256, 256, 64, 64, 4>; };
template <> struct ShapeFor<512> { using type = TileShape<512, 256, 64, 32, 4>; };

// A bias or boolean mask (BiasVariant16) reads an element per score it keeps,
// and its reader's pointers and strides take registers of their own: with
// ShapeFor's tiles the bias kernels spilled 7.1 KB of stores at head dim 64
// (128 × 128 scores a block) and 428 bytes at 128. Half the scores a warp
// holds remove the spills: 64 keys a block at 64, 64 rows (16 a warp) at 128
// (1.03–1.14× and 1.01–1.09× the old tiles' speed). At 32 and 96 (6.8 KB and 72
// bytes of spills) the halved tiles ran slower, 0.92–1.03× and 0.98×: the
// per-block work weighs more there than the spills. docs/perf/variants.md, v13.
template <int kHeadDim, class Variant,
          bool kHalved = std::is_same_v<Variant, BiasVariant16> &&
                         (kHeadDim == 64 || kHeadDim == 128)>
struct ForwardShape {
  using type = typename ShapeFor<kHeadDim>::type;
};
template <int kHeadDim, class Variant>
struct ForwardShape<kHeadDim, Variant, true> {
  using type = TileShape<kHeadDim, kHeadDim, kHeadDim == 64 ? 128 : 64, 64, 4>;
};

template <typename T, int kHeadDim, class Variant>
void launch_forward(const AttnParams& p) {
  using Shape = typename ForwardShape<kHeadDim, Variant>::type;
  const TileGrid grid = make_tile_grid(p.sizes, Shape::kBlockM, Shape::kDV, "cuda_mma");
  bool vec16 = true;
  for (const TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) vec16 = vec16 && rows_16b_aligned(*t, 2);
  const auto kernel = forward_kernel<T, Shape, Variant>;
  grant_shared_memory(kernel, Shape::kSmemBytes);
  kernel<<<grid.dims, Shape::kThreads, Shape::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(
      p, grid.divisors, vec16);
  check_launch("cuda_mma forward_kernel");
}

// The plain kernel, or the one that takes every variant where p asks for one.
template <typename T, int kHeadDim>
void run_forward(const AttnParams& p) {
  with_variant<AnyVariant16, BiasVariant16, DropoutVariant16>(
      p, [&](auto variant) { launch_forward<T, kHeadDim, decltype(variant)>(p); });
}

}  // namespace flashattn::cuda::mma
