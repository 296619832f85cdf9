// The Hopper forward's instantiations: run_forward<T, kHeadDim> for T in
// {__half, __nv_bfloat16} and kHeadDim one of kHeadDimBuckets; for plain
// attention also run_forward<T, 192, 128> (v's bucket narrower: traits.h's
// NarrowValueTraitsFor) and run_forward<T, B, B, depth> for (B, depth) in
// (64, 48), (128, 80), (128, 96), (192, 160), (384, 288), (384, 320) (Q·Kᵀ
// shallower than the bucket: ScoresDepth); each defined in its own file under
// inst/.
#pragma once

#include "cuda/backends.h"
#include "core/params.h"

namespace flashattn::cuda::sm90 {

inline constexpr int kHeadDimBuckets[] = {64, 128, 192, 256, 384, 512};
static_assert(kHeadDimBuckets[5] == kWgmmaMaxHeadDim);

template <typename T, int kHeadDim, int kHeadDimV = kHeadDim, int kHeadDimQK = kHeadDim>
void run_forward(const AttnParams& p);

}  // namespace flashattn::cuda::sm90
