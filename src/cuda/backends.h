// The CUDA backends as the host API sees them: plain C++ declarations, so the
// API files never include CUDA headers. Built from src/cuda/ when CUDA is on,
// else from src/cuda/unavailable.cpp, whose functions all throw Status::unsupported.
#pragma once

#include <string>

#include "params.h"

namespace flashattn::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no GPU.
int device_count();

// Compute capability as major·10 + minor; throws naming the device on failure.
int compute_capability(int device_index);

// Number of streaming multiprocessors.
int multiprocessors(int device_index);

// Most shared memory one block may use, in bytes (with the kernel's opt-in).
int shared_memory_per_block(int device_index);

// Throws Error(invalid_argument) naming `name` unless ptr is device memory that
// device `device_index` can read (device, managed or mapped host memory).
void require_device_pointer(const void* ptr, int device_index, const char* name);

void naive_forward(const AttnParams& p);
// cuda_tiled; fp32 problems that tiny_fits() run as one round of loads and a
// warp per query row (tiny.cu), which automatic also picks for them: such a
// call is all latency.
void tiled_forward(const AttnParams& p);
inline constexpr int kTinyMaxRows = 64, kTinyMaxKeys = 64, kTinyMaxHeadDim = 64;
inline bool tiny_fits(const AttnParams& p) {
  const Sizes& s = p.sizes;
  return p.dtype == DType::f32 && s.seqlen_q <= kTinyMaxRows && s.seqlen_k <= kTinyMaxKeys &&
         s.head_dim <= kTinyMaxHeadDim;
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

// Whether automatic runs fp32 on cuda_f16x3 rather than cuda_tf32x3. cuda_f16x3
// splits K and V once per call, in a kernel and a scratch buffer of its own, and
// that pays where enough query rows read each key (rows times the GQA group):
// up to head_dim 128, four 64-row query tiles (below, the ~10 µs of host time it
// adds exceeded its gain on the H100: equal at 200 rows); above, where
// cuda_tf32x3 recomputes the scores for each 128-column slice of the output, two
// 32-row tiles (on the H100 at head_dim 256 to 1024, cuda_f16x3 took 1.3–1.5×
// cuda_tf32x3's time at 32 rows and 0.4–0.8× at 100).
inline bool f16x3_preferred(const Sizes& s) {
  const int64_t rows = int64_t(s.seqlen_q) * s.group();
  if (s.head_dim <= 128) return rows >= 256;
  return s.head_dim <= kF16x3MaxHeadDim && rows >= 64;
}

// cuda_mma: f16/bf16 on tensor cores (mma.sync), head_dim up to kMmaMaxHeadDim.
inline constexpr int kMmaMaxHeadDim = 512;
void mma_forward(const AttnParams& p);

// cuda_wgmma: f16/bf16 on Hopper (TMA, wgmma, warp specialisation), head_dim up
// to kWgmmaMaxHeadDim. wgmma_unsupported() is empty when it can run p, else it
// names the argument and the rule (device, head_dim, TMA-describable strides).
inline constexpr int kWgmmaMaxHeadDim = 256;
std::string wgmma_unsupported(const AttnParams& p);
void wgmma_forward(const AttnParams& p);

}  // namespace flashattn::cuda
