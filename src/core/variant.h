// Score variants: a change to each score before the softmax, given the raw score
// s = q_i·k_j (before the scale), its query row and its key, returning a raw
// score r (the kernels keep their running max on raw scores and multiply by the
// scale in the exponent), so that scale·r is the variant's scaled score:
//   softcap c:  scale·r = c·tanh(scale·s / c)
//   ALiBi:      scale·r = (scale·s, softcapped if asked) − slope_h·|i + off − j|
// (off the mask's alignment, RowMask::alignment; FlashAttention's convention:
// softcap first, then ALiBi). The backward's chain rule needs ∂r/∂s, which
// the variant returns beside r: 1 − tanh² of the softcap's argument, 1 without.
//
// A kernel is instantiated with a Variant: NoVariant (plain attention: the
// identity score, no lower key ends, no dropout) or AnyVariant (every variant,
// each on or off at run time, windows' lower ends and dropout, core/dropout.h;
// the 16-bit tensor-core kernels keep dropout in DropoutVariant16). Every backend's score step calls
// the Variant's score functor before the mask and skips the call when
// kIdentity, so the plain instantiation pays nothing. needs_any_variant(p)
// (core/params.h) picks the instantiation for a call.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "core/host_device.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// A bias or boolean mask (flashattn::ScoreBias), checked: element (b, h, i, j)
// at data + b·batch_stride + h·head_stride + i·row_stride + j·key_stride
// (elements), broadcast dimensions at stride 0.
struct BiasParams {
  const void* data = nullptr;  // null: none
  BiasType type = BiasType::f32;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0, key_stride = 0;
  int64_t rows = 0;  // seqlen_q: kernels' padding rows read the last row's elements
};

// The score variants the caller asked for, checked (AttnParams::scores).
struct ScoreParams {
  float softcap = 0.0f;                 // > 0: softcap; 0: none
  const float* alibi_slopes = nullptr;  // heads_q slopes on the tensors' device; null: none
  BiasParams bias;                      // an additive bias or a boolean mask; data null: none
  FLASHATTN_HOST_DEVICE bool any() const {
    return softcap > 0.0f || alibi_slopes != nullptr || bias.data != nullptr;
  }
};

// A 16-bit float's value, on the host and the GPU (core includes no CUDA header:
// the conversion instruction by inline PTX there; core/half.h's on the host).
FLASHATTN_HOST_DEVICE float f16_bits_value(uint16_t h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("{ .reg .b16 x; mov.b16 x, %1; cvt.f32.f16 %0, x; }" : "=f"(f) : "h"(h));
  return f;
#else
  return f16_to_float(h);
#endif
}

FLASHATTN_HOST_DEVICE float bf16_bits_value(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// The bias of one (batch, query head): element (row, key) as a raw-score addend,
// r += value / scale (so that scale·r gains the value), and a boolean mask's
// zero as −inf in the scale's sign (so that scale·r is −inf). Loads by element
// type: read(visit) calls visit with a reader for the bias's type, so that a
// kernel's loop over its fragment is compiled once per type, without a branch
// per element.
template <typename F>
struct BiasRows {
  const void* head = nullptr;  // element (0, 0) of this batch index and head
  int64_t row_stride = 0, key_stride = 0, last_row = 0;
  BiasType type = BiasType::f32;
  F inv_scale = F(1);  // 1 / scale
  F masked = F(-INFINITY);  // −inf·sign(scale)

  template <typename T, typename Value>
  struct Reader {
    const T* head;
    int64_t row_stride, key_stride, last_row;
    F inv_scale, masked;
    // The addend of (row, key); row_at(row) once per row, then at(row_ptr, key).
    // A row past the last (a tile's padding) reads the last row; keys past the
    // last are the caller's to leave unread (the mask's key_end bounds them).
    FLASHATTN_HOST_DEVICE const T* row_at(int64_t row) const {
      return head + (row < last_row ? row : last_row) * row_stride;
    }
    FLASHATTN_HOST_DEVICE F at(const T* row, int64_t key) const {
      return Value::addend(row[key * key_stride], inv_scale, masked);
    }
    FLASHATTN_HOST_DEVICE F operator()(int64_t row, int64_t key) const { return at(row_at(row), key); }
  };
  struct FloatValue {
    FLASHATTN_HOST_DEVICE static F addend(float x, F inv_scale, F) { return F(x) * inv_scale; }
  };
  struct F16Value {
    FLASHATTN_HOST_DEVICE static F addend(uint16_t x, F inv_scale, F) {
      return F(f16_bits_value(x)) * inv_scale;
    }
  };
  struct BF16Value {
    FLASHATTN_HOST_DEVICE static F addend(uint16_t x, F inv_scale, F) {
      return F(bf16_bits_value(x)) * inv_scale;
    }
  };
  struct BoolValue {
    FLASHATTN_HOST_DEVICE static F addend(uint8_t x, F, F masked) { return x ? F(0) : masked; }
  };

  template <typename Visit>
  FLASHATTN_HOST_DEVICE void read(Visit&& visit) const {
    switch (type) {
      case BiasType::f32:
        return visit(Reader<float, FloatValue>{static_cast<const float*>(head), row_stride,
                                               key_stride, last_row, inv_scale, masked});
      case BiasType::f16:
        return visit(Reader<uint16_t, F16Value>{static_cast<const uint16_t*>(head), row_stride,
                                                key_stride, last_row, inv_scale, masked});
      case BiasType::bf16:
        return visit(Reader<uint16_t, BF16Value>{static_cast<const uint16_t*>(head), row_stride,
                                                 key_stride, last_row, inv_scale, masked});
      case BiasType::boolean:
        return visit(Reader<uint8_t, BoolValue>{static_cast<const uint8_t*>(head), row_stride,
                                                key_stride, last_row, inv_scale, masked});
    }
  }
  // One addend, the type chosen per call (the scalar kernels and the references).
  FLASHATTN_HOST_DEVICE F operator()(int64_t row, int64_t key) const {
    F x = F(0);
    if (head != nullptr) read([&](const auto& reader) { x = reader(row, key); });
    return x;
  }
};

FLASHATTN_HOST_DEVICE constexpr int64_t bias_type_size(BiasType t) {
  return t == BiasType::f32 ? 4 : t == BiasType::boolean ? 1 : 2;
}

// The bias rows of batch index b and query head hq, for a kernel whose scale is
// `scale` (nonzero for a float bias: validation rejects a zero one).
template <typename F>
FLASHATTN_HOST_DEVICE BiasRows<F> bias_rows(const BiasParams& bp, F scale, int b, int hq) {
  BiasRows<F> r;
  if (bp.data == nullptr) return r;
  r.head = static_cast<const char*>(bp.data) +
           (b * bp.batch_stride + hq * bp.head_stride) * int64_t(bias_type_size(bp.type));
  r.row_stride = bp.row_stride;
  r.key_stride = bp.key_stride;
  r.last_row = bp.rows - 1;
  r.type = bp.type;
  r.inv_scale = bp.type == BiasType::boolean ? F(1) : F(1) / scale;
  r.masked = scale < F(0) ? F(INFINITY) : F(-INFINITY);
  return r;
}

struct IdentityScore {
  static constexpr bool kIdentity = true;
  static constexpr bool kBias = false;
  template <typename F>
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t /*row*/, int64_t /*key*/) const {
    return s;
  }
  template <typename F>
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t /*row*/, int64_t /*key*/, F& ds) const {
    ds = F(1);
    return s;
  }
};

// tanh in F's own precision, on the host and the GPU. On the GPU as
// 1 − 2/(e^(2x) + 1): one exponential and one reciprocal, against tanhf's
// branches and polynomial, whose registers the Hopper kernels cannot spare;
// its absolute error stays within a few 1e-7 (e^(2x) overflowing to +inf gives 1).
// kApprox: the GPU's one-instruction tanh (tanh.approx, relative error 2^-11),
// for the 16-bit kernels (AnyVariant16 below).
template <bool kApprox = false, typename F>
FLASHATTN_HOST_DEVICE F tanh_of(F x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(F) == sizeof(float)) {
    if constexpr (kApprox) {
      float t;
      asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
      return t;
    } else {
      return 1.0f - __fdividef(2.0f, exp2f(x * 2.8853900817779268f) + 1.0f);  // 2·log2(e)
    }
  }
#endif
  if constexpr (sizeof(F) == sizeof(float)) return tanhf(x);
  else return tanh(x);
}

// Softcap and ALiBi for one query head, with the kernel's scale folded in.
// A kernel may pass ALiBi's signed distance i + off − j itself (at()), as a
// float it steps by constants across a fragment: per score that is one add,
// where converting row and key is a conversion on the exponential's pipe.
template <typename F, bool kApproxTanh = false>
struct SoftcapAlibi {
  static constexpr bool kIdentity = false;
  static constexpr bool kBias = false;
  F cap_in;    // scale / c: the tanh's argument per raw score; 0 without softcap
  F cap_out;   // c / scale
  F slope;     // slope_h / scale: ALiBi's bias per key of distance, in raw units; 0: none
  int64_t alignment;

  // i + off − j: exact in F below 2^24 (float) keys of distance.
  FLASHATTN_HOST_DEVICE F distance(int64_t row, int64_t key) const {
    return F(row + alignment - key);
  }
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t row, int64_t key) const {
    F ds;
    return at(s, distance(row, key), ds);
  }
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t row, int64_t key, F& ds) const {
    return at(s, distance(row, key), ds);
  }
  FLASHATTN_HOST_DEVICE F at(F s, F distance) const {
    F ds;
    return at(s, distance, ds);
  }
  FLASHATTN_HOST_DEVICE F at(F s, F distance, F& ds) const {
    ds = F(1);
    if (cap_in != F(0)) {
      const F t = tanh_of<kApproxTanh>(s * cap_in);
      ds = F(1) - t * t;
      s = cap_out * t;
    }
    if (slope != F(0)) s -= slope * (distance < F(0) ? -distance : distance);
    return s;
  }
};

// The functor of head hq for a kernel whose softmax scale is `scale` (nonzero:
// validation rejects a zero scale with softcap or ALiBi, whose raw form would
// divide by it; cuda::run_forward's sign change of q keeps scale·r unchanged).
template <typename F, bool kApproxTanh = false>
FLASHATTN_HOST_DEVICE SoftcapAlibi<F, kApproxTanh> softcap_alibi(const ScoreParams& sp, F scale,
                                                                 int hq, int64_t alignment) {
  SoftcapAlibi<F, kApproxTanh> v;
  v.cap_in = sp.softcap > 0.0f ? scale / F(sp.softcap) : F(0);
  v.cap_out = sp.softcap > 0.0f ? F(sp.softcap) / scale : F(0);
  v.slope = sp.alibi_slopes ? F(sp.alibi_slopes[hq]) / scale : F(0);
  v.alignment = alignment;
  return v;
}

// The reader of a functor without a bias: the kernels' score steps take one of
// either kind and test Score::kBias before they use it.
struct NoBiasReader {
  FLASHATTN_HOST_DEVICE const void* row_at(int64_t) const { return nullptr; }
  FLASHATTN_HOST_DEVICE float at(const void*, int64_t) const { return 0.0f; }
};

// SoftcapAlibi, then the bias: the functor of the kernels' bias instantiation.
// operator() adds the bias of (row, key) itself; the tensor-core kernels' score
// steps call at() for the softcap and ALiBi and add the bias through bias.read,
// with the element type chosen once per fragment.
template <typename F, bool kApproxTanh = false>
struct SoftcapAlibiBias : SoftcapAlibi<F, kApproxTanh> {
  static constexpr bool kBias = true;
  BiasRows<F> bias;
  using SoftcapAlibi<F, kApproxTanh>::at;
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t row, int64_t key) const {
    return this->at(s, this->distance(row, key)) + bias(row, key);
  }
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t row, int64_t key, F& ds) const {
    return this->at(s, this->distance(row, key), ds) + bias(row, key);
  }
};

template <typename F, bool kApproxTanh = false>
FLASHATTN_HOST_DEVICE SoftcapAlibiBias<F, kApproxTanh> softcap_alibi_bias(const ScoreParams& sp,
                                                                          F scale, int b, int hq,
                                                                          int64_t alignment) {
  SoftcapAlibiBias<F, kApproxTanh> v;
  static_cast<SoftcapAlibi<F, kApproxTanh>&>(v) =
      softcap_alibi<F, kApproxTanh>(sp, scale, hq, alignment);
  v.bias = bias_rows<F>(sp.bias, scale, b, hq);
  return v;
}

// The kernels' instantiations: Variant::score(scores, scale, b, hq, alignment)
// is the functor of batch index b and query head hq.
struct NoVariant {
  static constexpr bool kLowerEnds = false;
  static constexpr bool kDropout = false;
  using Score = IdentityScore;
  template <typename F>
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams&, F, int, int, int64_t) { return {}; }
};

struct AnyVariant {
  static constexpr bool kLowerEnds = true;
  static constexpr bool kDropout = true;  // on or off at run time (AttnParams::dropout)
  using Score = SoftcapAlibi<float>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int, int hq,
                                           int64_t alignment) {
    return softcap_alibi<float>(sp, scale, hq, alignment);
  }
};

// AnyVariant for the 16-bit tensor-core kernels (cuda_mma, cuda_wgmma): the
// hardware tanh. Its error (2^-11 relative, at most c·2^-11 on a capped score)
// lies below the 16-bit rounding of the scores that standard attention in that
// dtype makes, while the accurate form's exponential and reciprocal tripled the
// load on the multi-function units that the softmax's exponentials already
// bound (the Hopper forward ran 3.2× plain attention's time with it).
struct AnyVariant16 {
  static constexpr bool kLowerEnds = true;
  static constexpr bool kDropout = false;  // DropoutVariant16 below
  using Score = SoftcapAlibi<float, true>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int, int hq,
                                           int64_t alignment) {
    return softcap_alibi<float, true>(sp, scale, hq, alignment);
  }
};

// AnyVariant16 with dropout (core/dropout.h): an instantiation of its own in the
// 16-bit tensor-core kernels, so that the generator's registers and branches
// cost softcap, ALiBi and windows nothing there (they took cuda_mma's backward
// from +19% to +28% over plain attention when dropout rode on AnyVariant16).
struct DropoutVariant16 : AnyVariant16 {
  static constexpr bool kDropout = true;  // on or off at run time (AttnParams::dropout)
};

// Every variant and a bias or boolean mask: an instantiation of its own, so that
// the bias's pointer and strides cost softcap and ALiBi nothing.
struct BiasVariant {
  static constexpr bool kLowerEnds = true;
  static constexpr bool kDropout = true;  // on or off at run time (AttnParams::dropout)
  using Score = SoftcapAlibiBias<float>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int b, int hq,
                                           int64_t alignment) {
    return softcap_alibi_bias<float>(sp, scale, b, hq, alignment);
  }
};

struct BiasVariant16 {
  static constexpr bool kLowerEnds = true;
  static constexpr bool kDropout = true;  // on or off at run time (AttnParams::dropout)
  using Score = SoftcapAlibiBias<float, true>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int b, int hq,
                                           int64_t alignment) {
    return softcap_alibi_bias<float, true>(sp, scale, b, hq, alignment);
  }
};

}  // namespace flashattn
