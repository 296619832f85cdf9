// The launch of one instantiation of the Hopper backward: the fp32 dQ sums
// (and, in deterministic mode, the turn counters) in scratch memory, zeroed;
// TMA descriptors; the key-tile kernel over the grid of common/backward_walk.cuh;
// then write_dq.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/error.h"
#include "cuda/common/check.h"
#include "cuda/common/dq_output.h"
#include "cuda/sm90/backward.h"
#include "cuda/sm90/backward_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda::sm90 {

template <typename T, int kHeadDim, class Variant>
void launch_backward(const BwdParams& p) {
  using Tr = typename BackwardTraitsFor<kHeadDim>::type;
  const Sizes& s = p.sizes;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const int query_tiles = (s.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int key_tiles = (s.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
  const int64_t blocks = int64_t(key_tiles) * s.batch * s.heads_kv;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "k: shape too large for cuda_wgmma's grid");

  const DqSums sums(p, query_tiles, Tr::kBlockM, kHeadDim);

  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  BackwardKernelParams kp;
  kp.q = make_tensor_map(p.q, bf16, s.head_dim, s.seqlen_q, s.heads_q, s.batch, Tr::kBlockM);
  kp.dout = make_tensor_map(p.grad.dout, bf16, s.head_dim, s.seqlen_q, s.heads_q, s.batch,
                            Tr::kBlockM);
  kp.k = make_tensor_map(p.k, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, Tr::kBlockN);
  kp.v = make_tensor_map(p.v, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, Tr::kBlockN);
  kp.dk = make_tensor_map(p.grad.dk, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, 64);
  kp.dv = make_tensor_map(p.grad.dv, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, 64);
  kp.p = p;
  kp.query_tiles = query_tiles;
  kp.dq_accum = sums.accum();
  kp.turns = sums.turns();

  const auto kernel = backward_kernel<T, Tr, Variant>;
  FLASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tr::kSmemBytes));
  kernel<<<unsigned(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(kp);
  check_launch("cuda_wgmma backward_kernel");
  write_dq(p, sums.accum(), sums.layout());
}

// The plain kernel, or the one that takes every variant where p asks for one.
template <typename T, int kHeadDim>
void run_backward(const BwdParams& p) {
  with_variant<AnyVariant16, BiasVariant16, DropoutVariant16>(
      p, [&](auto variant) { launch_backward<T, kHeadDim, decltype(variant)>(p); });
}

}  // namespace flashattn::cuda::sm90
