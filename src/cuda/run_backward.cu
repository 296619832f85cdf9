// cuda::run_backward: what every CUDA backward shares, done once around its
// entry point. D_i = Σ_c dO_ic·O_ic gets its scratch here, (batch, heads_q,
// seqlen_q): every backward kernel needs it as a row constant (dS = P∘(dP − D)),
// and computing it inside a key-tile kernel would repeat it for every key tile.
// The backend computes it first (common/row_dot.h), so that the tensor-core
// ones zero their dQ sums in the same pass. A problem without query rows or
// without keys has gradients of 0 (no row sees a key), written here without the
// backend's kernels. Unlike the forward, no scale needs a changed q: the backward takes P
// from the forward's lse (P = e^(scale·s − lse)) and keeps no running max.
// Prefix sums the host did not check are checked first (common/packed_check.h).
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/element.cuh"
#include "cuda/common/grid_stride.h"
#include "cuda/common/packed_check.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

// t = 0 over (batch, rows, heads, head_dim).
template <typename T>
__global__ void __launch_bounds__(kThreads) zero_kernel(TensorRef t, int batch, int rows,
                                                        int heads, int head_dim) {
  const int64_t n = int64_t(batch) * rows * heads * head_dim;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * kThreads) {
    const int c = int(e % head_dim);
    const int64_t h = e / head_dim % heads, r = e / head_dim / heads % rows;
    const int64_t b = e / head_dim / heads / rows;
    static_cast<T*>(t.data)[b * t.batch_stride + r * t.row_stride + h * t.head_stride + c] =
        from_float<T>(0.0f);
  }
}

template <typename T>
void zero(const TensorRef& t, int batch, int rows, int heads, int head_dim, cudaStream_t stream) {
  const int64_t n = int64_t(batch) * rows * heads * head_dim;
  if (n == 0) return;
  zero_kernel<T><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(t, batch, rows, heads,
                                                                          head_dim);
  check_launch("zero_kernel");
}

// run_backward once the prefix sums (if any) are checked.
void differentiate(void (*backward)(const BwdParams&), const BwdParams& p) {
  const Sizes s = storage_sizes(p);  // a packed batch's tensors: batch 1 of every sequence
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (p.sizes.seqlen_q == 0 || p.sizes.seqlen_k == 0) {
    with_element_type(p.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      zero<T>(p.grad.dq, s.batch, s.seqlen_q, s.heads_q, s.head_dim, stream);
      zero<T>(p.grad.dk, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, stream);
      zero<T>(p.grad.dv, s.batch, s.seqlen_k, s.heads_kv, s.head_dim_v, stream);
    });
    return;
  }
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  Scratch row_dot(size_t(rows) * sizeof(float), p.device_index, p.stream);
  BwdParams with_dots = p;
  with_dots.grad.row_dot = static_cast<float*>(row_dot.data());
  backward(with_dots);
}

}  // namespace

void run_backward(void (*backward)(const BwdParams&), const BwdParams& p) {
  DeviceGuard device(p.device_index);
  const Sizes s = storage_sizes(p);
  on_checked_sequences(
      p, [&](const BwdParams& checked) { differentiate(backward, checked); },
      {{p.grad.dq, s.seqlen_q, s.heads_q, s.head_dim},
       {p.grad.dk, s.seqlen_k, s.heads_kv, s.head_dim},
       {p.grad.dv, s.seqlen_k, s.heads_kv, s.head_dim_v}},
      nullptr, 0);
}

}  // namespace flashattn::cuda
