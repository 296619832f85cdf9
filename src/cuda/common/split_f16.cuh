// fp32 operands on fp16 tensor cores at fp32 accuracy. A group of values that
// shares one power-of-two scale 2^e, chosen so that the group's largest |x|·2^e
// lies in [2^14, 2^15) (inside fp16's range with room to round up), is split as
//   x·2^e = hi + lo,   hi = fp16(x·2^e),   lo = fp16(x·2^e − hi).
// hi and lo keep 11 significant bits each, so at most 2^-22 of |x·2^e| is lost,
// as in a 3×TF32 split; a product of two groups is then
//   a·b = (hi_a·hi_b + hi_a·lo_b + lo_a·hi_b)·2^-(e_a + e_b)
// (lo_a·lo_b, 2^-22 of it, dropped): three fp16 mma with fp32 accumulation, at
// twice the TF32 rate. Values under 2^-18 of their group's largest have lo in
// fp16's subnormal range: an absolute error of at most 2^-39 of that largest
// value, far below the fp32 rounding of any sum that contains it.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda {

// |x| where x is finite, else 0: what a group's scale is chosen from. An
// infinite value splits to ±inf and NaN whatever the scale (its products are
// NaN, as the rows that see it must be), and must not set the scale of the
// finite values beside it: a scale of 2^-114 would turn them all to 0.
__device__ __forceinline__ float finite_abs(float x) {
  const float a = fabsf(x);
  return a < INFINITY ? a : 0.0f;  // NaN fails the test too
}

// The e above for a group whose largest finite magnitude is max_abs; 0 for a
// group of zeros, and clamped so that 2^e and 2^-e are normal floats.
__device__ __forceinline__ int split_exponent(float max_abs) {
  if (!(max_abs > 0.0f)) return 0;
  const int floor_log2 = int((__float_as_uint(max_abs) >> 23) & 0xffu) - 127;
  return min(max(14 - floor_log2, -126), 126);
}

// 2^e for e in [-126, 127], exactly.
__device__ __forceinline__ float exp2_int(int e) {
  return __uint_as_float(uint32_t(e + 127) << 23);
}

// Softmax probabilities P ≤ 2^8 (2^8 with the rescale slack of mma::kRescaleSlack)
// are split after a factor 2^kPLog2Bias: P·2^6 ≤ 2^14 stays inside fp16's range,
// and its smallest normal 2^-14 then stands for P = 2^-20, so small P keep their
// bits. The row sums carry the same factor, so out = acc / l is unchanged.
constexpr float kPLog2Bias = 6.0f;

struct HalfPairs {
  uint32_t hi, lo;  // two fp16 each, x0 in the low half
};

// x rounded to fp16's 11 significant bits (half away from zero) in fp32 bits: an
// integer add and a mask, where a round trip through fp16 would cost two of the
// SM's scarce conversion instructions.
__device__ __forceinline__ float round_to_11_bits(float x) {
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

// (x0, x1) = hi + lo as above (x already scaled): hi is exact in fp16 (in its
// normal range), x − hi is exact in fp32, and only lo is rounded.
__device__ __forceinline__ HalfPairs split_pair(float x0, float x1) {
  const float h0 = round_to_11_bits(x0), h1 = round_to_11_bits(x1);
  const __half2 hi = __floats2half2_rn(h0, h1);
  const __half2 lo = __floats2half2_rn(x0 - h0, x1 - h1);
  return {*reinterpret_cast<const uint32_t*>(&hi), *reinterpret_cast<const uint32_t*>(&lo)};
}

}  // namespace flashattn::cuda
