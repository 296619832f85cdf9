// The 16-bit tensor-core backward's instantiations: run_backward<T, kHeadDim>
// for T in {__half, __nv_bfloat16} and kHeadDim one of kBackwardHeadDimBuckets,
// each defined in its own file under inst/; write_dq (dq_output.cu) finishes dq.
#pragma once

#include "core/params.h"
#include "cuda/backends.h"

namespace flashattn::cuda::mma {

// Head dims 65..128, 129..256 and 257..512 run on the 128, 256 and 512
// kernels: buckets of 96, 192 or 384 would need warp column shares that
// straddle the tiles' 64-column panels (backward_shape.cuh).
inline constexpr int kBackwardHeadDimBuckets[] = {32, 64, 128, 256, 512};
static_assert(kBackwardHeadDimBuckets[4] == kMmaBackwardMaxHeadDim);

template <typename T, int kHeadDim>
void run_backward(const BwdParams& p);

// dq = scale·accum for every row and head: accum holds (batch, heads_q) blocks
// of rows_padded × cols fp32 sums (cols >= head_dim) in dq_accum.cuh's layout.
void write_dq(const BwdParams& p, const float* accum, int rows_padded, int cols);

}  // namespace flashattn::cuda::mma
