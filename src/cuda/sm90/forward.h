// The Hopper forward's instantiations: run_forward<T, kHeadDim> for T in
// {__half, __nv_bfloat16} and kHeadDim one of kHeadDimBuckets, each defined in
// its own file under inst/.
#pragma once

#include "cuda/backends.h"
#include "core/params.h"

namespace flashattn::cuda::sm90 {

inline constexpr int kHeadDimBuckets[] = {64, 128, 192, 256};
static_assert(kHeadDimBuckets[3] == kWgmmaMaxHeadDim);

template <typename T, int kHeadDim>
void run_forward(const AttnParams& p);

}  // namespace flashattn::cuda::sm90
