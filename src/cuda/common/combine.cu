// The merge of key splits (combine.h): one thread per 4 output columns of a
// query row, so that even a few rows of wide heads spread over the whole GPU.
#include <cmath>

#include "core/softmax.h"
#include "cuda/common/check.h"
#include "cuda/common/combine.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/element.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

// vec4: head_dim % 4 == 0, so that partial columns move as float4, and out's
// rows (fp32) 16-byte aligned, so that output columns do too.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const AttnParams p, const KeySplit split, bool vec4) {
  const Sizes& s = p.sizes;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int groups = (s.head_dim + 3) / 4;
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= rows * groups) return;
  const int64_t row = index / groups;  // (b, hq, i)
  const int c0 = 4 * int(index % groups);
  // Weights relative to the largest split; all zero for a row that saw no key,
  // NaN for a row with a NaN split.
  float lse_top = -INFINITY;
  for (int j = 0; j < split.count; ++j) lse_top = lse_max(lse_top, split.lse[j * rows + row]);
  const int cols = min(4, s.head_dim - c0);
  float o[4] = {}, sum = 0.0f;
  for (int j = 0; j < split.count; ++j) {
    const float weight = partial_weight(split.lse[j * rows + row], lse_top);
    sum += weight;
    const float* part = split.out + (j * rows + row) * s.head_dim + c0;
    if (vec4) {
      const float4 x = *reinterpret_cast<const float4*>(part);
      o[0] = fmaf(weight, x.x, o[0]), o[1] = fmaf(weight, x.y, o[1]);
      o[2] = fmaf(weight, x.z, o[2]), o[3] = fmaf(weight, x.w, o[3]);
    } else {
      for (int e = 0; e < cols; ++e) o[e] = fmaf(weight, part[e], o[e]);
    }
  }
  const bool empty = lse_top == -INFINITY;
  const FinishedRow<float> merged = finish_row(lse_top, sum, empty);
  const int i = int(row % s.seqlen_q), hq = int(row / s.seqlen_q % s.heads_q);
  const int b = int(row / (int64_t(s.seqlen_q) * s.heads_q));
  T* out = static_cast<T*>(p.o.data) + b * p.o.batch_stride + hq * p.o.head_stride +
           int64_t(i) * p.o.row_stride + c0;
  if constexpr (sizeof(T) == sizeof(float)) {
    if (vec4 && cols == 4) {
      *reinterpret_cast<float4*>(out) =
          make_float4(merged.out(o[0]), merged.out(o[1]), merged.out(o[2]), merged.out(o[3]));
      if (p.softmax.lse && c0 == 0) p.softmax.lse[row] = merged.lse;
      return;
    }
  }
  for (int e = 0; e < cols; ++e) out[e] = from_float<T>(merged.out(o[e]));
  if (p.softmax.lse && c0 == 0) p.softmax.lse[row] = merged.lse;
}

}  // namespace

void merge_key_splits(const AttnParams& p, const KeySplit& split) {
  const Sizes& s = p.sizes;
  const int64_t threads = int64_t(s.batch) * s.heads_q * s.seqlen_q * ((s.head_dim + 3) / 4);
  const bool vec4 = s.head_dim % 4 == 0 &&
                    (p.dtype != DType::f32 || rows_16b_aligned(p.o, sizeof(float)));
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    merge_kernel<T><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(p.stream)>>>(p, split, vec4);
  });
  check_launch("merge_kernel");
}

}  // namespace flashattn::cuda
