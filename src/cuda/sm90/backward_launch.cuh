// The launch of one instantiation of the Hopper backward: the fp32 dQ sums
// (and, in deterministic mode, the turn counters; with a split tail, its dK
// and dV sums and counters) in scratch memory, zeroed;
// TMA descriptors; the key-tile kernel over the grid of common/backward_walk.cuh;
// then write_dq. The key-tile kernel is launched early (common/launch.h),
// while the D pass finishes.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/error.h"
#include "cuda/common/dq_output.h"
#include "cuda/common/launch.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/device.h"
#include "cuda/sm90/backward.h"
#include "cuda/sm90/backward_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda::sm90 {

// kPacked: p is a packed batch (core/seqlen.h). The maps then cover the
// tensors' own rows (one batch index of the total lengths), and the grid the
// longest sequence's key tiles for every sequence.
template <typename T, class Tr, class Variant, bool kPacked = false>
void launch_backward(const BwdParams& p) {
  constexpr int kHeadDim = Tr::kHeadDim;
  const Sizes& s = p.sizes;
  const Sizes stored = storage_sizes(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const int query_tiles = (s.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int key_tiles = (s.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
  const int64_t blocks = int64_t(key_tiles) * s.batch * s.heads_kv;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "k: shape too large for cuda_wgmma's grid");
  // The last wave's key tiles split by steps (core/tail_split.h), where
  // every walk has the same steps (no mask ends, a dense batch), dQ's adds take
  // no turns and the attention is plain (the split kernel's rule); past 2^30
  // blocks, where it would be a few blocks in many waves, not at all.
  constexpr bool kCanSplit = !kPacked && std::is_same_v<Variant, NoVariant>;
  TailSplit tail;
  if (kCanSplit && !p.grad.deterministic && !p.mask.bounded_above && !p.mask.bounded_below &&
      blocks < (int64_t(1) << 30))
    tail = tail_split(blocks, multiprocessors(p.device_index), query_tiles * s.group(),
                      kBackwardTailCosts);
  const int64_t tail_tiles = tail.parts > 1 ? blocks - tail.first : 0;
  const size_t tail_sum_bytes = size_t(tail_tiles) * 2 * Tr::kBlockN * kHeadDim * sizeof(float);

  const DqSums sums(p, query_tiles, Tr::kBlockM, Tr::kDQWidth,
                    tail_sum_bytes + size_t(tail_tiles) * sizeof(int));

  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // q, k and dk of head_dim columns, v, dout and dv of head_dim_v: TMA fills
  // the bucket's columns past each tensor's width with zeros, which add
  // nothing to Sᵀ and dPᵀ, and clips the stores of dk and dv at it.
  const auto map = [&](const TensorRef& t, int cols, int seqlen, int heads, int box_rows) {
    return make_tensor_map(t, bf16, cols, seqlen, heads, stored.batch, box_rows);
  };
  BackwardKernelParams kp;
  kp.q = map(p.q, s.head_dim, stored.seqlen_q, s.heads_q, Tr::kBlockM);
  kp.dout = map(p.grad.dout, s.head_dim_v, stored.seqlen_q, s.heads_q, Tr::kBlockM);
  kp.k = map(p.k, s.head_dim, stored.seqlen_k, s.heads_kv, Tr::kBlockN);
  kp.v = map(p.v, s.head_dim_v, stored.seqlen_k, s.heads_kv, Tr::kBlockN);
  kp.dk = map(p.grad.dk, s.head_dim, stored.seqlen_k, s.heads_kv, 64);
  kp.dv = map(p.grad.dv, s.head_dim_v, stored.seqlen_k, s.heads_kv, 64);
  kp.p = p;
  kp.query_tiles = query_tiles;
  kp.dq_accum = sums.accum();
  kp.dq_layout = sums.layout();
  kp.turns = sums.turns();
  kp.turn_group = sums.turn_group();
  kp.tail = tail;
  kp.tail_sums = static_cast<float*>(sums.extra());
  kp.tail_counts = reinterpret_cast<int*>(static_cast<char*>(sums.extra()) + tail_sum_bytes);
  // Deterministic mode's dQ adds from the first key tile up at d128, where
  // the adds from the last down left a causal slice's longest walks last
  // (v12: 1.12–1.14× the default's time, against 1.00–1.10× in the order from
  // the first). d64 read the same in both; at d256, whose dQ holds a Q/dO
  // stage through its turn, the order from the first read 1.15–1.37× against
  // 1.13–1.19× (v16).
  kp.adds_from_first = kp.turns != nullptr && kHeadDim == 128;

  const auto kernel = tail.parts > 1 ? backward_kernel<T, Tr, Variant, kPacked, kCanSplit>
                                     : backward_kernel<T, Tr, Variant, kPacked>;
  grant_shared_memory(kernel, Tr::kSmemBytes);
  const int64_t grid = blocks + tail_tiles * (tail.parts - 1);
  // Early (common/launch.h): the blocks may start while the D pass finishes;
  // they wait for it where they read D or add into the zeroed sums.
  KernelLaunch(dim3(unsigned(grid)), dim3(Tr::kThreads), Tr::kSmemBytes, stream)
      .early_where(runs_sm90a_code(p.device_index))(kernel, "cuda_wgmma backward_kernel", kp);
  write_dq(p, sums.accum(), sums.layout());
}

// The plain kernel, or the one that takes every variant where p asks for one.
template <typename T, int kHeadDim>
void run_backward(const BwdParams& p) {
  using Tr = typename BackwardTraitsFor<kHeadDim>::type;
  with_variant<AnyVariant16, BiasVariant16, DropoutVariant16>(
      p, [&](auto variant) { launch_backward<T, Tr, decltype(variant)>(p); });
}

// A packed batch: the plain kernel, or the one that takes the score variants
// and windows (wgmma_unsupported refuses a bias and dropout with packed
// batches, as the forward does).
template <typename T, int kHeadDim>
void run_packed_backward(const BwdParams& p) {
  using Tr = typename BackwardTraitsFor<kHeadDim>::type;
  if (p.scores.bias.data != nullptr || p.dropout.on())
    fail(Status::internal, "variants: cuda_wgmma's packed backward takes no bias or dropout");
  if (needs_any_variant(p)) launch_backward<T, Tr, AnyVariant16, true>(p);
  else launch_backward<T, Tr, NoVariant, true>(p);
}

// Plain attention, dense or packed, in the kHeadDim bucket with Sᵀ kHeadDimQK
// deep and dPᵀ kHeadDimV deep (NarrowBackwardTraits).
template <typename T, int kHeadDim, int kHeadDimV, int kHeadDimQK>
void run_narrow_backward(const BwdParams& p) {
  using Tr = typename NarrowBackwardTraits<kHeadDim, kHeadDimV, kHeadDimQK>::type;
  if (needs_any_variant(p))
    fail(Status::internal, "variants: cuda_wgmma's backward kernels of head dims ", kHeadDimQK, "/",
         kHeadDimV, " take plain attention only");
  if (p.seqs.packed()) launch_backward<T, Tr, NoVariant, true>(p);
  else launch_backward<T, Tr, NoVariant>(p);
}

}  // namespace flashattn::cuda::sm90
