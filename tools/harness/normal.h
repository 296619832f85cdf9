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

namespace flashattn::harness {

// SplitMix64's output function: a bijection of 64-bit words whose outputs for
// consecutive inputs pass the usual statistical tests.
inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A standard normal draw for (seed, stream, index), by Box-Muller from two
// uniforms in (0, 1] and [0, 1) of 53 bits each.
inline float standard_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t key = mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ull));
  const uint64_t a = mix64(key + 2 * index), b = mix64(key + 2 * index + 1);
  const double u1 = double((a >> 11) + 1) * 0x1p-53, u2 = double(b >> 11) * 0x1p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Every element of the buffers' views set to stddev · standard_normal(seed, n, e)
// (buffer n of the list, e the element's index in (batch, seqlen, heads,
// head_dim) order), stored in dtype; rows drawn in parallel.
void fill_normal(std::initializer_list<Buffer*> buffers, DType dtype, float stddev, uint64_t seed);

}  // namespace flashattn::harness
