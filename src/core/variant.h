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
// identity score, no lower key ends) or AnyVariant (every variant, each on or
// off at run time, and windows' lower ends). Every backend's score step calls
// the Variant's score functor before the mask and skips the call when
// kIdentity, so the plain instantiation pays nothing. needs_any_variant(p)
// (core/params.h) picks the instantiation for a call.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

// The score variants the caller asked for, checked (AttnParams::scores).
struct ScoreParams {
  float softcap = 0.0f;                 // > 0: softcap; 0: none
  const float* alibi_slopes = nullptr;  // heads_q slopes on the tensors' device; null: none
  FLASHATTN_HOST_DEVICE bool any() const { return softcap > 0.0f || alibi_slopes != nullptr; }
};

struct IdentityScore {
  static constexpr bool kIdentity = true;
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

// The kernels' instantiations.
struct NoVariant {
  static constexpr bool kLowerEnds = false;
  using Score = IdentityScore;
  template <typename F>
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams&, F, int, int64_t) { return {}; }
};

struct AnyVariant {
  static constexpr bool kLowerEnds = true;
  using Score = SoftcapAlibi<float>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int hq,
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
  using Score = SoftcapAlibi<float, true>;
  FLASHATTN_HOST_DEVICE static Score score(const ScoreParams& sp, float scale, int hq,
                                           int64_t alignment) {
    return softcap_alibi<float, true>(sp, scale, hq, alignment);
  }
};

}  // namespace flashattn
