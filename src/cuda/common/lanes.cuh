// Reductions over the lanes of a warp whose indices differ from this lane's only
// in the bits of kLaneBits (31: the whole warp; 7: groups of 8 consecutive
// lanes; 24: lanes 8 apart). Every lane of a group gets the same result.
#pragma once

namespace flashattn::cuda {

template <unsigned kLaneBits>
__device__ __forceinline__ float lanes_max(float x) {
#pragma unroll
  for (unsigned bit = 1; bit < 32; bit <<= 1)
    if (kLaneBits & bit) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, bit));
  return x;
}

template <unsigned kLaneBits>
__device__ __forceinline__ float lanes_sum(float x) {
#pragma unroll
  for (unsigned bit = 1; bit < 32; bit <<= 1)
    if (kLaneBits & bit) x += __shfl_xor_sync(0xffffffffu, x, bit);
  return x;
}

}  // namespace flashattn::cuda
