// cuda_f16x3 for wide heads (head_dim above 128, up to 1024): K and V split
// into mma fragment order, then wide_kernel.cuh.
#pragma once

#include "core/params.h"

namespace flashattn::cuda::f16x3 {

inline constexpr int kWideHeadDims[] = {256, 512, 1024};

void wide_forward(const AttnParams& p);

}  // namespace flashattn::cuda::f16x3
