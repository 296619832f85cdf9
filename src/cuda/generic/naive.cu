// Naive CUDA attention: one thread per (batch, q head, query row), simple enough
// to be obviously right. Pass 1 walks the visible keys once for
//   m = max_j s_j  and  l = Σ_j exp(s_j − m)   (online: l rescaled when m grows);
// pass 2 walks them again per chunk of kOutChunk output columns, accumulating
// exp(s_j − m)/l · v_j in registers. Scores are recomputed, never stored.
#include <cmath>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kOutChunk = 16;  // output columns held in registers per pass

template <typename T>
__device__ float score(const T* q, const T* k, int head_dim, float scale) {
  float dot = 0.0f;
  for (int c = 0; c < head_dim; ++c) dot += to_float(q[c]) * to_float(k[c]);
  return dot * scale;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) naive_kernel(const AttnParams p) {
  const Sizes s = p.sizes;
  const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (row >= int64_t(s.batch) * s.heads_q * s.seqlen_q) return;
  const int i = int(row % s.seqlen_q);
  const int hq = int(row / s.seqlen_q % s.heads_q);
  const int b = int(row / s.seqlen_q / s.heads_q);
  const int hk = hq / s.group();
  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch_stride + i * p.q.row_stride +
               hq * p.q.head_stride;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch_stride + hk * p.k.head_stride;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch_stride + hk * p.v.head_stride;
  T* o = static_cast<T*>(p.o.data) + b * p.o.batch_stride + i * p.o.row_stride +
         hq * p.o.head_stride;
  const int key_end = p.mask.key_end(i, s.seqlen_k);
  const float scale = p.softmax.scale;

  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < key_end; ++j) {
    const float sj = score(q, k + j * p.k.row_stride, s.head_dim, scale);
    const float m_new = fmaxf(m, sj);
    l = l * expf(m - m_new) + expf(sj - m_new);
    m = m_new;
  }
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;

  for (int c0 = 0; c0 < s.head_dim; c0 += kOutChunk) {
    float acc[kOutChunk] = {};
    for (int j = 0; j < key_end; ++j) {
      const float pj = expf(score(q, k + j * p.k.row_stride, s.head_dim, scale) - m) * inv_l;
      const T* vj = v + j * p.v.row_stride + c0;
#pragma unroll
      for (int c = 0; c < kOutChunk; ++c)
        if (c0 + c < s.head_dim) acc[c] += pj * to_float(vj[c]);
    }
#pragma unroll
    for (int c = 0; c < kOutChunk; ++c)
      if (c0 + c < s.head_dim) o[c0 + c] = from_float<T>(acc[c]);
  }
  if (p.softmax.lse)
    p.softmax.lse[(int64_t(b) * s.heads_q + hq) * s.seqlen_q + i] =
        l > 0.0f ? m + logf(l) : -INFINITY;
}

}  // namespace

void naive_forward(const AttnParams& p) {
  DeviceGuard device(p.device_index);
  const int64_t rows = int64_t(p.sizes.batch) * p.sizes.heads_q * p.sizes.seqlen_q;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "q: batch × heads × seqlen is too large");
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    naive_kernel<T><<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
    check_launch("naive_kernel");
  });
}

}  // namespace flashattn::cuda
