// Tile shapes per head-dim bucket and the launch of one instantiation of the
// 16-bit tensor-core backward: the fp32 dQ sums (and, in deterministic mode,
// the per-tile turn counters) in scratch memory, zeroed; the key-tile kernel;
// then write_dq. Each (dtype, bucket) pair is compiled in its own file under
// inst/, so the instantiations build in parallel.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/common/check.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/dq_output.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/sm80/mma/backward.h"
#include "cuda/sm80/mma/backward_kernel.cuh"

namespace flashattn::cuda::mma {

// BackwardShape<kD, kBlockM, kBlockN, kSWarpsM, kKVWarpsN, kQWarpsM, kQPasses>,
// after FlashAttention-2's choices for sm_80: 128 keys per block up to d = 128,
// 64 at 256, where dK and dV (2 × 64 × 256 fp32 over 256 threads: 128 registers
// a thread) leave no room for more; 64 query rows per tile, 128 at d = 64, where
// the per-tile costs (barriers, lse and D, the mask test) weigh most (+16 to 27%,
// at the price of 56 bytes of spills). Each warp's share of dK and dV
// (32 keys × kD / 2 or kD / 4 columns) is as square as the 8 warps allow, which
// minimises its operand reads. At 512, 32 keys (dK and dV: 2 × 32 × 512, again
// 128 registers a thread) and one Q and dO buffer: K, V, Q and dO take 192 KiB.
// Measurements: docs/perf/cuda_mma_backward.md.
template <int kHeadDim>
struct BackwardShapeFor;
template <> struct BackwardShapeFor<32> { using type = BackwardShape<32, 64, 128, 2, 4, 4, 1>; };
template <> struct BackwardShapeFor<64> { using type = BackwardShape<64, 128, 128, 2, 4, 4, 1>; };
template <> struct BackwardShapeFor<128> { using type = BackwardShape<128, 64, 128, 2, 4, 2, 1>; };
template <> struct BackwardShapeFor<256> { using type = BackwardShape<256, 64, 64, 2, 2, 2, 2>; };
template <> struct BackwardShapeFor<512> {
  using type = BackwardShape<512, 64, 32, 4, 1, 2, 4, /*kQStages=*/1>;
};

template <typename T, int kHeadDim, class Variant>
void launch_backward(const BwdParams& p) {
  using Shape = typename BackwardShapeFor<kHeadDim>::type;
  const Sizes& s = p.sizes;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const int query_tiles = (s.seqlen_q + Shape::kBlockM - 1) / Shape::kBlockM;
  const int key_tiles = (s.seqlen_k + Shape::kBlockN - 1) / Shape::kBlockN;
  const int64_t blocks = int64_t(key_tiles) * s.batch * s.heads_kv;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "k: shape too large for cuda_mma's grid");

  const DqSums sums(p, query_tiles, Shape::kBlockM, Shape::kD);

  bool vec16 = true;
  for (const TensorRef* t : {&p.q, &p.k, &p.v, &p.grad.dout, &p.grad.dk, &p.grad.dv})
    vec16 = vec16 && rows_16b_aligned(*t, 2);
  const auto kernel = backward_kernel<T, Shape, Variant>;
  grant_shared_memory(kernel, Shape::kSmemBytes);
  kernel<<<unsigned(blocks), Shape::kThreads, Shape::kSmemBytes, stream>>>(
      p, query_tiles, sums.accum(), sums.layout(), sums.turns(), sums.turn_group(), vec16);
  check_launch("cuda_mma backward_kernel");
  write_dq(p, sums.accum(), sums.layout());
}

// The plain kernel, or the one that takes every variant where p asks for one.
template <typename T, int kHeadDim>
void run_backward(const BwdParams& p) {
  with_variant<AnyVariant16, BiasVariant16, DropoutVariant16>(
      p, [&](auto variant) { launch_backward<T, kHeadDim, decltype(variant)>(p); });
}

}  // namespace flashattn::cuda::mma
