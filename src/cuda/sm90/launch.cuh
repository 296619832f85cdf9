// The launch of one instantiation of the Hopper forward: TMA descriptors for
// Q, K, V and the output, the kernel's parameters, one block per query tile.
#pragma once

#include <cmath>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/tile_grid.cuh"
#include "cuda/sm90/forward.h"
#include "cuda/sm90/kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda::sm90 {

// Whether causal blocks go heads fastest (see tile_of_block). It pays when the
// grid is a few waves, so the tail of light tiles is a large share of the run,
// and the heads are few, so at least 4 blocks of each run at once and share its
// K and V in L2. On the H100: 16 heads, 2.7 waves +25% (d 64); 8 heads, 1.9
// waves +43% (d 128); 16 heads, 7.8 waves +4% (d 256). Beyond these limits it
// loses: 64 heads, 7.8 waves −17%; 16 heads, 15.5 waves −3%.
inline bool heads_fastest(const AttnParams& p, const TileGrid& grid) {
  constexpr int kMinBlocksPerHead = 4;
  constexpr int kMaxWaves = 12;
  const int sms = multiprocessors(p.device_index);
  const int64_t heads = int64_t(p.sizes.batch) * p.sizes.heads_q;
  return p.mask.causal && heads * kMinBlocksPerHead <= sms &&
         int64_t(grid.dims.x) <= int64_t(kMaxWaves) * sms;
}

template <typename T, int kHeadDim>
void run_forward(const AttnParams& p) {
  using Tr = typename TraitsFor<kHeadDim>::type;
  const Sizes& s = p.sizes;
  const TileGrid grid = make_tile_grid(s, Tr::kBlockM, Tr::kHeadDim, "cuda_wgmma");
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  KernelParams kp;
  kp.q = make_tensor_map(p.q, bf16, s.head_dim, s.seqlen_q, s.heads_q, s.batch, Tr::kBlockM);
  kp.k = make_tensor_map(p.k, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, Tr::kBlockN);
  kp.v = make_tensor_map(p.v, bf16, s.head_dim, s.seqlen_k, s.heads_kv, s.batch, Tr::kBlockN);
  kp.o = make_tensor_map(p.o, bf16, s.head_dim, s.seqlen_q, s.heads_q, s.batch, 64);
  kp.sizes = s;
  kp.mask = p.mask;
  kp.lse = p.softmax.lse;
  kp.scale = p.softmax.scale;
  kp.scale_log2 = p.softmax.scale * float(M_LOG2E);
  kp.m_blocks = grid.m_blocks;
  kp.heads_fastest = heads_fastest(p, grid);
  const auto kernel = forward_kernel<T, Tr>;
  FLASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tr::kSmemBytes));
  kernel<<<grid.dims.x, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(kp);
  check_launch("cuda_wgmma forward_kernel");
}

}  // namespace flashattn::cuda::sm90
