// AttnParams: the one struct every backend consumes. Built by src/api/validate.cpp
// from checked public arguments; backends trust it and never re-validate.
#pragma once

#include <cstdint>

#include "flashattn/flashattn.hpp"

#ifdef __CUDACC__
#define FLASHATTN_HOST_DEVICE __host__ __device__
#else
#define FLASHATTN_HOST_DEVICE
#endif

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

// Key j is visible to query i iff !causal or j <= i + causal_offset.
struct MaskSpec {
  bool causal = false;
  int64_t causal_offset = 0;  // 0 top-left, seqlen_k - seqlen_q bottom-right

  // Keys [0, key_end(i)) are visible to query row i (0 when none is).
  FLASHATTN_HOST_DEVICE int key_end(int64_t i, int seqlen_k) const {
    if (!causal) return seqlen_k;
    const int64_t end = i + causal_offset + 1;
    return end <= 0 ? 0 : (end >= seqlen_k ? seqlen_k : int(end));
  }
};

struct SoftmaxSpec {
  float scale = 1.0f;     // multiplies Q·Kᵀ
  float* lse = nullptr;   // optional, contiguous (batch, heads_q, seqlen_q)
};

struct AttnParams {
  TensorRef q, k, v, o;
  Sizes sizes;
  MaskSpec mask;
  SoftmaxSpec softmax;
  DType dtype = DType::f32;  // q, k, v and out share it
  int device_index = 0;
  void* stream = nullptr;
};

}  // namespace flashattn
