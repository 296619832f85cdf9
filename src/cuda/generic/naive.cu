// Naive CUDA attention: one thread per (batch, q head, query row), simple enough
// to be obviously right. Pass 1 walks the row's keys (core/mask.h) once for
//   m = max_j s_j  and  l = Σ_j 2^((s_j − m)·c)   (core/softmax.h, OnlineRow);
// pass 2 walks them again per chunk of kOutChunk output columns, accumulating
// 2^((s_j − m)·c)·v_j in registers, then out = acc / l. Scores are recomputed,
// never stored. A row walks its mask's key range (a window's included), and
// softcap and ALiBi change each raw score through one functor, the identity when
// neither is asked for: one instantiation, as this path is for checking, not speed.
#include <cmath>

#include "core/dropout.h"
#include "core/mask.h"
#include "core/softmax.h"
#include "core/variant.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kOutChunk = 16;  // output columns held in registers per pass

// The raw score q·k.
template <typename T>
__device__ float dot(const T* q, const T* k, int head_dim) {
  float sum = 0.0f;
  for (int c = 0; c < head_dim; ++c) sum += to_float(q[c]) * to_float(k[c]);
  return sum;
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
  const Sequence seq = sequence(p, b);
  if (i >= seq.seqlen_q) return;  // a shorter sequence of a packed batch
  const T* q = static_cast<const T*>(p.q.data) + row_offset(p.q, b, seq.q_row0 + i) +
               hq * p.q.head_stride;
  // Key j's row of this kv head (a paged cache's through its block table).
  const T* k = static_cast<const T*>(p.k.data) + hk * p.k.head_stride;
  const T* v = static_cast<const T*>(p.v.data) + hk * p.v.head_stride;
  T* o = static_cast<T*>(p.o.data) + row_offset(p.o, b, seq.q_row0 + i) + hq * p.o.head_stride;
  const RowMask mask = row_mask(p, seq);
  const int key_begin = mask.key_begin(i), key_end = mask.key_end(i);
  const float c = p.softmax.scale_log2;
  const SoftcapAlibiBias<float> variant =
      softcap_alibi_bias(p.scores, p.softmax.scale, b, hq, mask.alignment);

  // The raw score of key j after the variant (core/variant.h), computed in both passes.
  const auto score = [&](int j) {
    return variant(dot(q, k + key_offset(p, p.k, b, seq, j), s.head_dim), i, j);
  };

  OnlineRow state;
  for (int j = key_begin; j < key_end; ++j) {
    const float sj = score(j);
    state.raise_max(sj, c);
    state.l += exp2f(fmaf(sj, c, state.neg_max_c(c)));
  }
  // A bias can leave a row with only −inf scores: empty (core/softmax.h, finished_empty).
  const bool empty = mask.empty(i) || (p.scores.bias.data != nullptr && state.l == 0.0f);
  FinishedRow<float> finished = finish_row(state.m * p.softmax.scale, state.l, empty);
  finished.inv_l *= p.dropout.keep_scale;  // dropout's (core/dropout.h); 1 without
  const DropoutRows dropout = dropout_rows(p.dropout, b, s.heads_q, hq);

  for (int c0 = 0; c0 < s.head_dim_v; c0 += kOutChunk) {
    float acc[kOutChunk] = {};
    for (int j = key_begin; j < key_end; ++j) {
      float pj = exp2f(fmaf(score(j), c, state.neg_max_c(c)));
      if (p.dropout.on() && !dropout.keep(i, j)) pj = 0.0f;
      const T* vj = v + key_offset(p, p.v, b, seq, j) + c0;
#pragma unroll
      for (int e = 0; e < kOutChunk; ++e)
        if (c0 + e < s.head_dim_v) acc[e] += pj * to_float(vj[e]);
    }
#pragma unroll
    for (int e = 0; e < kOutChunk; ++e)
      if (c0 + e < s.head_dim_v) o[c0 + e] = from_float<T>(finished.out(acc[e]));
  }
  if (p.softmax.lse) p.softmax.lse[stats_row0(p, b, hq, seq) + i] = finished.lse;
}

}  // namespace

void naive_forward(const AttnParams& p) {
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
