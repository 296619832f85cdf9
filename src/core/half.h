// Host-side fp16 and bf16 conversions (round to nearest even), so CPU backends
// and tools read and write 16-bit tensors without the CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashattn/flashattn.hpp"

namespace flashattn {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);  // keep it a quiet NaN
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000 | (man << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal: man · 2^-24.
  const float mag = std::ldexp(float(man), -24);
  return sign ? -mag : mag;
}

inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return uint16_t(sign | 0x7E00);
  if (a >= 65520.0f) return uint16_t(sign | 0x7C00);  // rounds to infinity
  if (a < 6.103515625e-05f) {
    // Subnormal or zero: a multiple of 2^-24, rounded to nearest even by rint.
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(a, 24))));
  }
  uint32_t bits = float_bits(a);
  const uint32_t exp = ((bits >> 23) & 0xFF) - 112;
  uint32_t man = bits & 0x7FFFFF;
  uint32_t h = (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carry may bump the exponent
  return uint16_t(sign | h);
}

// Reads element `index` of a buffer of `dtype` as float.
inline float load_float(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[index];
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
  }
  return 0.0f;
}

inline void store_float(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[index] = value; break;
    case DType::f16: static_cast<uint16_t*>(data)[index] = float_to_f16(value); break;
    case DType::bf16: static_cast<uint16_t*>(data)[index] = float_to_bf16(value); break;
  }
}

// The value x takes when stored in dtype.
inline float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(x));
    case DType::bf16: return bf16_to_float(float_to_bf16(x));
    case DType::f32: return x;
  }
  return x;
}

}  // namespace flashattn
