// AttnParams: the one struct that flows from the API to every backend. Built by
// src/api/validate.cpp from checked public arguments (attn_params() below is the
// conversion itself, without the checks); backends trust it and never
// re-validate. Fields come in sub-structs (tensors, sizes, mask, softmax), so a
// new capability adds a sub-struct rather than loose fields.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/mask.h"
#include "core/seqlen.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// A tensor's base pointer and its (batch, seqlen, head) strides in elements;
// the head_dim stride is 1 by validation.
struct TensorRef {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

struct Sizes {
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  FLASHATTN_HOST_DEVICE int group() const { return heads_q / heads_kv; }  // query heads per kv head (GQA)
};

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e)
inline constexpr float kLn2 = 0.69314718055994531f;   // ln(2)

struct SoftmaxParams {
  float scale = 1.0f;          // multiplies Q·Kᵀ; any finite value
  float scale_log2 = kLog2e;   // scale·log2(e): probabilities are 2^(s·scale_log2 − max)
  float* lse = nullptr;        // optional, contiguous (batch, heads_q, seqlen_q), natural log
};

struct AttnParams {
  TensorRef q, k, v, o;
  Sizes sizes;
  // The mask resolved for the batch's lengths: in a dense batch every sequence
  // has the same, so the rule is resolved once (attn_params()); kernels read it
  // through row_mask(p, b) from their parameters, as a constant, not a register.
  RowMask mask{};
  SoftmaxParams softmax;
  DType dtype = DType::f32;  // q, k, v and out share it
  int device_index = 0;
  void* stream = nullptr;
};

inline TensorRef tensor_ref(const TensorView& t) {
  return {t.data, t.stride[0], t.stride[1], t.stride[2]};
}

// The AttnParams of public Params, unchecked: validate.cpp checks first, tools
// that hold params the library already accepted call it directly.
inline AttnParams attn_params(const Params& p) {
  AttnParams a;
  a.sizes = {int(p.q.shape[0]), int(p.q.shape[1]), int(p.k.shape[1]),
             int(p.q.shape[2]), int(p.k.shape[2]), int(p.q.shape[3])};
  a.q = tensor_ref(p.q);
  a.k = tensor_ref(p.k);
  a.v = tensor_ref(p.v);
  a.o = tensor_ref(p.out);
  const MaskRule rule{p.mask != Mask::none, p.mask == Mask::causal_bottom_right};
  a.mask = resolve(rule, {a.sizes.seqlen_q, a.sizes.seqlen_k});
  const float scale = p.scale.value_or(1.0f / std::sqrt(float(a.sizes.head_dim)));
  a.softmax = {scale, scale * kLog2e, p.lse};
  a.dtype = p.q.dtype;
  a.device_index = p.q.device.index;
  a.stream = p.stream;
  return a;
}

// The key range the rows of sequence b see. Dense: every sequence has the batch's
// mask, resolved once; a layout with per-sequence lengths resolves it per
// sequence here (see core/seqlen.h).
FLASHATTN_HOST_DEVICE const RowMask& row_mask(const AttnParams& p, int /*batch*/) { return p.mask; }

}  // namespace flashattn
