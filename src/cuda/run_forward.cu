// cuda::run_forward: the edges every CUDA backend shares, handled once around
// its entry point rather than in each kernel: a problem without keys (every row
// empty: output 0, lse −inf) is written by one small kernel, and a scale that is
// not positive runs on a changed q. The kernels take their running max on raw
// scores and compute 2^(s·c − m·c): for c < 0 the raw max is the scaled minimum,
// and for c = 0 a masked score gives −inf·0 = NaN. So scale < 0 runs as −q with
// −scale, and scale = 0 as q·0 with scale 1: the same scores, NaN included
// (q·0 is NaN where q is not finite, and 0·k is NaN where k is not). Prefix
// sums the host did not check are checked first (common/packed_check.h).
#include <cmath>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"
#include "cuda/common/grid_stride.h"
#include "cuda/common/packed_check.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

// Every row sees no key: out = 0 over (batch, seqlen_q, heads_q, head_dim_v), lse = −inf;
// over the tensors' own sizes (a packed batch's lse follows them too).
template <typename T>
__global__ void __launch_bounds__(kThreads) fill_empty_rows_kernel(const AttnParams p) {
  const Sizes s = storage_sizes(p);
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;  // (b, hq, i), lse's order
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < rows * s.head_dim_v;
       e += int64_t(gridDim.x) * kThreads) {
    const int64_t row = e / s.head_dim_v;
    const int c = int(e % s.head_dim_v), i = int(row % s.seqlen_q);
    const int hq = int(row / s.seqlen_q % s.heads_q), b = int(row / s.seqlen_q / s.heads_q);
    static_cast<T*>(p.o.data)[b * p.o.batch_stride + int64_t(i) * p.o.row_stride +
                              hq * p.o.head_stride + c] = from_float<T>(0.0f);
    if (c == 0 && p.softmax.lse) p.softmax.lse[row] = -INFINITY;
  }
}

// dst (contiguous, q's shape) = q·factor.
template <typename T>
__global__ void __launch_bounds__(kThreads) scale_q_kernel(const AttnParams p, T* dst,
                                                           float factor) {
  const Sizes s = storage_sizes(p);
  const int64_t n = int64_t(s.batch) * s.seqlen_q * s.heads_q * s.head_dim;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * kThreads) {
    const int c = int(e % s.head_dim);
    const int64_t hq = e / s.head_dim % s.heads_q, i = e / s.head_dim / s.heads_q % s.seqlen_q;
    const int64_t b = e / s.head_dim / s.heads_q / s.seqlen_q;
    const T x = static_cast<const T*>(
        p.q.data)[b * p.q.batch_stride + i * p.q.row_stride + hq * p.q.head_stride + c];
    dst[e] = from_float<T>(to_float(x) * factor);
  }
}

// run_forward once the prefix sums (if any) are checked.
void attend(void (*forward)(const AttnParams&), const AttnParams& p) {
  const Sizes s = storage_sizes(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (p.sizes.seqlen_k == 0) {
    with_element_type(p.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t elements = int64_t(s.batch) * s.heads_q * s.seqlen_q * s.head_dim_v;
      fill_empty_rows_kernel<T>
          <<<grid_stride_blocks(elements, kThreads), kThreads, 0, stream>>>(p);
    });
    check_launch("fill_empty_rows_kernel");
    return;
  }
  if (p.softmax.scale > 0.0f) {
    forward(p);
    return;
  }
  const float factor = p.softmax.scale < 0.0f ? -1.0f : 0.0f;
  const int64_t n = int64_t(s.batch) * s.seqlen_q * s.heads_q * s.head_dim;
  Scratch changed_q(size_t(n) * dtype_size(p.dtype), p.device_index, p.stream);
  AttnParams changed = p;
  changed.q = {changed_q.data(), p.seqs.packed() ? 0 : int64_t(s.seqlen_q) * s.heads_q * s.head_dim,
               int64_t(s.heads_q) * s.head_dim, s.head_dim};
  changed.softmax.scale = factor < 0.0f ? -p.softmax.scale : 1.0f;
  changed.softmax.scale_log2 = changed.softmax.scale * kLog2e;
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_q_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
        p, static_cast<T*>(changed_q.data()), factor);
  });
  check_launch("scale_q_kernel");
  forward(changed);
}

}  // namespace

void run_forward(void (*forward)(const AttnParams&), const AttnParams& p) {
  DeviceGuard device(p.device_index);
  const Sizes s = storage_sizes(p);
  on_checked_sequences(
      p, [&](const AttnParams& checked) { attend(forward, checked); },
      {{p.o, s.seqlen_q, s.heads_q, s.head_dim_v}}, p.softmax.lse, int64_t(s.heads_q) * s.seqlen_q);
}

}  // namespace flashattn::cuda
