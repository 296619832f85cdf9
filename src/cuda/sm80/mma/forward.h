// The 16-bit tensor-core forward's instantiations: run_forward<T, kHeadDim> for
// T in {__half, __nv_bfloat16} and kHeadDim one of kHeadDimBuckets, each defined
// in its own file under inst/.
#pragma once

#include "cuda/backends.h"
#include "core/params.h"

namespace flashattn::cuda::mma {

inline constexpr int kHeadDimBuckets[] = {32, 64, 96, 128, 192, 256, 512};
static_assert(kHeadDimBuckets[6] == kMmaMaxHeadDim);

template <typename T, int kHeadDim>
void run_forward(const AttnParams& p);

}  // namespace flashattn::cuda::mma
