// The Hopper backward's instantiations: run_backward<T, kHeadDim> (dense
// batches) and run_packed_backward<T, kHeadDim> (packed ones, core/seqlen.h)
// for T in {__half, __nv_bfloat16} and kHeadDim one of
// kBackwardHeadDimBuckets, and run_narrow_backward, each defined in its own
// file under inst/.
#pragma once

#include "core/params.h"
#include "cuda/backends.h"

namespace flashattn::cuda::sm90 {

inline constexpr int kBackwardHeadDimBuckets[] = {64, 128, 256};
static_assert(kBackwardHeadDimBuckets[2] == kWgmmaBackwardMaxHeadDim);

template <typename T, int kHeadDim>
void run_backward(const BwdParams& p);

template <typename T, int kHeadDim>
void run_packed_backward(const BwdParams& p);

// Plain attention (dense or packed) whose q and k, and v, are narrower than
// the bucket: Sᵀ kHeadDimQK deep, dPᵀ kHeadDimV deep. Instantiated for the 256
// bucket at 192/192 (head dims 176–192) and 192/128 (multi-head latent
// attention).
template <typename T, int kHeadDim, int kHeadDimV, int kHeadDimQK>
void run_narrow_backward(const BwdParams& p);

}  // namespace flashattn::cuda::sm90
