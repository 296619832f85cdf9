// The 16-bit tensor-core backward's instantiations: run_backward<T, kHeadDim>
// for T in {__half, __nv_bfloat16} and kHeadDim one of kBackwardHeadDimBuckets,
// each defined in its own file under inst/.
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

}  // namespace flashattn::cuda::mma
