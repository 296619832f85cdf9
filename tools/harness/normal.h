// Random inputs drawn in parallel: each element's value is a function of the
// seed, a stream number and the element's index alone (a counter-based draw),
// so a problem's inputs are the same whatever the thread count and the order
// in which threads fill them. The harness's long KV caches hold 10^8 elements,
// which one std::normal_distribution took 10 s to draw.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "buffer.h"
#include "core/dropout.h"

namespace flashattn::harness {

// A standard normal draw for (seed, stream, index), by Box-Muller from two
// 53-bit uniforms in (0, 1] and [0, 1): the four words of one Philox4x32-10 call
// (core/dropout.h) whose counter is (index, stream) and whose key is the seed.
inline float standard_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4 w = philox4x32<10>(
      {{uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)}},
      uint32_t(seed), uint32_t(seed >> 32));
  const uint64_t a = (uint64_t(w.x[0]) << 32 | w.x[1]) >> 11;
  const uint64_t b = (uint64_t(w.x[2]) << 32 | w.x[3]) >> 11;
  const double u1 = double(a + 1) * 0x1p-53, u2 = double(b) * 0x1p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Every element of the buffers' views set to stddev · standard_normal(seed, n, e)
// (buffer n of the list, e the element's index in (batch, seqlen, heads,
// head_dim) order), stored in dtype; rows drawn in parallel.
void fill_normal(std::initializer_list<Buffer*> buffers, DType dtype, float stddev, uint64_t seed);

}  // namespace flashattn::harness
