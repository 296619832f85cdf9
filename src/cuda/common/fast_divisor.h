// Division by a divisor fixed for a launch, as one multiply-high, an add and a
// shift (the round-up method of Granlund and Montgomery), for the per-tile
// index arithmetic of persistent kernels: a division by a runtime value is some
// twenty instructions, and a short tile's coordinates take several.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

struct FastDivisor {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;  // with the implicit 2^32: ⌊2^(32+shift)/divisor⌋ + 1 − 2^32
  uint32_t shift = 0;       // ⌈log2 divisor⌉

  FastDivisor() = default;
  // divisor ≥ 1, set on the host.
  explicit FastDivisor(int d) : divisor(uint32_t(d)) {
    while ((uint64_t(1) << shift) < divisor) ++shift;
    multiplier = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor)) / divisor + 1);
    if (divisor == 1) multiplier = 0;
  }

#ifdef __CUDACC__
  // n / divisor for 0 ≤ n < 2^31 (the add below stays within 32 bits).
  __device__ __forceinline__ int div(int n) const {
    return int((__umulhi(uint32_t(n), multiplier) + uint32_t(n)) >> shift);
  }
  // quotient and remainder of n.
  __device__ __forceinline__ int divmod(int n, int& remainder) const {
    const int q = div(n);
    remainder = n - q * int(divisor);
    return q;
  }
#endif
};

}  // namespace flashattn::cuda
