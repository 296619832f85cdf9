// The CUDA backends as the host API sees them: their entry points and the facts
// of each that the registry (src/api/registry.cpp) and the kernels share. Plain
// C++ declarations, so the API files never include CUDA headers; built from
// src/cuda/ when CUDA is on, else from unavailable.cpp, whose entry points throw
// Status::unsupported.
#pragma once

#include <string>

#include "core/params.h"
#include "cuda/device.h"

namespace flashattn::cuda {

// Every entry point takes validated AttnParams with work to do (batch, seqlen_q
// and seqlen_k all >= 1) and a scale > 0, and runs under run_forward's device
// guard: run_forward (below) handles the other cases.
void naive_forward(const AttnParams& p);

// cuda_tiled; fp32 problems that tiny_fits() run as one round of loads and a
// warp per query row (tiny.cu), which automatic also picks for them: such a
// call is all latency. Those kernels stage K and V rows of one width: v's
// head_dim other than q's runs the tiled kernel.
void tiled_forward(const AttnParams& p);
inline constexpr int kTinyMaxRows = 64, kTinyMaxKeys = 64, kTinyMaxHeadDim = 64;
inline bool tiny_fits(const AttnParams& p) {
  const Sizes& s = p.sizes;
  return p.dtype == DType::f32 && !p.seqs.ragged() && s.seqlen_q <= kTinyMaxRows &&
         s.seqlen_k <= kTinyMaxKeys && s.head_dim <= kTinyMaxHeadDim && s.head_dim_v == s.head_dim;
}
void tiny_forward(const AttnParams& p);
// The smallest of them (head_dim and seqlen_k at most 32, offsets within 32
// bits) run on one warp per query row holding K and V in registers (tiny_warp.cu);
// tiny_warp_fits takes a p that tiny_fits already accepted.
inline constexpr int kTinyWarpMaxKeys = 32, kTinyWarpMaxHeadDim = 32;
bool tiny_warp_fits(const AttnParams& p);
void tiny_warp_forward(const AttnParams& p);

void tf32x3_forward(const AttnParams& p);

// cuda_f16x3: fp32 through a scaled fp16 hi/lo split, head_dim up to kF16x3MaxHeadDim
// (above 128 on the wide-head kernel, whose warps split head_dim).
inline constexpr int kF16x3MaxHeadDim = 1024;
void f16x3_forward(const AttnParams& p);

// cuda_mma: f16/bf16 on tensor cores (mma.sync), head_dim up to kMmaMaxHeadDim.
inline constexpr int kMmaMaxHeadDim = 512;
// Its decode kernel, which paged and unchecked KV caches take: head_dim up to this.
inline constexpr int kMmaDecodeMaxHeadDim = 256;
void mma_forward(const AttnParams& p);

// cuda_wgmma: f16/bf16 on Hopper (TMA, wgmma, warp specialisation), head_dim up
// to kWgmmaMaxHeadDim. wgmma_unsupported() is empty when it can run p, else it
// names the argument and the rule (device, head_dim, TMA-describable strides).
inline constexpr int kWgmmaMaxHeadDim = 512;
std::string wgmma_unsupported(const AttnParams& p);
void wgmma_forward(const AttnParams& p);

// Backward entry points: validated BwdParams with batch, seqlen_q and seqlen_k
// all >= 1 and grad.row_dot's scratch, which each fills first
// (common/row_dot.h); any finite scale (no changed q: the backward kernels
// take P from lse and never form a running max). Run under run_backward (below).
void tiled_backward(const BwdParams& p);
// cuda_mma's backward (mma.sync, FlashAttention-2's schedule): f16/bf16, head_dim
// up to kMmaBackwardMaxHeadDim.
inline constexpr int kMmaBackwardMaxHeadDim = 512;
void mma_backward(const BwdParams& p);
// cuda_wgmma's backward: f16/bf16 on Hopper, head_dim up to
// kWgmmaBackwardMaxHeadDim; wgmma_backward_unsupported() is empty when it can
// run p, else it names the argument and the rule (the forward's, and TMA for
// dout, dk and dv).
inline constexpr int kWgmmaBackwardMaxHeadDim = 256;
std::string wgmma_backward_unsupported(const BwdParams& p);
void wgmma_backward(const BwdParams& p);

// A KV cache's new keys and values written into it (AttnParams::new_keys) on
// p's stream, before a backend attends. Unchecked lengths are checked here on
// the device: a sequence whose length would pass the capacity, or a page index
// out of range, writes nothing (the attention gives that sequence NaN).
void append_to_cache(const AttnParams& p);
// Whether `forward` (a backend's entry point) appends p's new keys itself as it
// reads them (cuda_mma's decode kernel), so that append_to_cache must not run
// before it. Only when p has query rows: else the forward does not run.
bool forward_appends(void (*forward)(const AttnParams&), const AttnParams& p);

// Runs `backward` on p with p's device current, with scratch for D =
// rowsum(dO∘O); a problem without query rows or without keys by writing zeros
// (dk and dv, or dq) without the backend's kernels.
void run_backward(void (*backward)(const BwdParams&), const BwdParams& p);

// Runs `forward` (one of the entry points above) on p with p's device current:
// a problem without keys by writing its empty rows (output 0, lse −inf) without
// a kernel of the backend's, and a scale <= 0 on a changed copy of q in scratch
// memory (run_forward.cu says why).
void run_forward(void (*forward)(const AttnParams&), const AttnParams& p);

}  // namespace flashattn::cuda
