// Standard attention with cuBLAS. Tensors are row-major (seqlen, head_dim) per
// head with row stride row_stride; cuBLAS is column-major, so a row-major
// (rows × cols) matrix is its column-major transpose with the same leading
// dimension, and each product is computed transposed:
//   Sᵀ (seqlen_k × seqlen_q) = K · Qᵀ    S row-major with leading dimension seqlen_k
//   Oᵀ (head_dim × seqlen_q) = Vᵀ · Pᵀ   O written in place through its row stride
// Heads are one strided batch: for MHA all heads in one call; for GQA one call
// per kv head over its group of q heads, with K's (or V's) batch stride 0.
#include <cublas_v2.h>

#include <climits>
#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/mask.h"
#include "cuda_call.h"
#include "standard_cuda.h"

namespace flashattn::baselines {
namespace {

__device__ float to_float(float x) { return x; }
__device__ float to_float(__half x) { return __half2float(x); }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ T from_float(float x) {
  return T(x);  // float, __half and __nv_bfloat16 convert from float, rounding to nearest
}

constexpr int kSoftmaxThreads = 256;
constexpr int kWarps = kSoftmaxThreads / 32;

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(Status::cuda_error, "standard (cuda): ", call, " failed: ", cublasGetStatusString(status));
}

cudaDataType_t cublas_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  fail(Status::internal, "dtype: no cuBLAS type");
}

void* allocate(size_t bytes, size_t total_bytes, const char* what) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: running out is reported, not sticky
    throw DeviceOutOfMemory(std::string("standard (cuda): out of device memory for the ") + what,
                            total_bytes);
  }
  tools::cuda_call(status, "cudaMalloc");
  return ptr;
}

// Running max m and Σ exp(x − m) of a set of scores, mergeable across threads.
struct MaxSum {
  float m, l;
};

__device__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

__device__ MaxSum warp_merge(MaxSum x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x = merge(x, {__shfl_xor_sync(0xffffffffu, x.m, offset),
                  __shfl_xor_sync(0xffffffffu, x.l, offset)});
  return x;
}

__device__ MaxSum block_merge(MaxSum x) {
  __shared__ MaxSum per_warp[kWarps];
  __shared__ MaxSum total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = warp_merge(x);
  if (lane == 0) per_warp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = warp_merge(lane < kWarps ? per_warp[lane] : MaxSum{-INFINITY, 0.0f});
    if (lane == 0) total = x;
  }
  __syncthreads();
  return total;
}

// One block per row of a batch's S, rows ordered (q head, query). Turns raw
// Q·Kᵀ into probabilities in place; masked keys get 0, so a row with no
// visible key gives O = 0. lse (the batch's slice, or null) gets m + ln l.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(T* scores, int seqlen_k, RowMask mask, float scale, float* lse) {
  const int64_t row = blockIdx.x;
  T* s = scores + row * seqlen_k;
  const int key_end = mask.key_end(row % mask.seqlen_q);
  MaxSum part{-INFINITY, 0.0f};
  for (int j = threadIdx.x; j < key_end; j += kSoftmaxThreads) {
    const float x = to_float(s[j]) * scale;
    if (x > part.m) {
      part.l = part.l * expf(part.m - x) + 1.0f;
      part.m = x;
    } else {
      part.l += expf(x - part.m);
    }
  }
  const MaxSum stats = block_merge(part);
  const float inv_l = stats.l > 0.0f ? 1.0f / stats.l : 0.0f;
  for (int j = threadIdx.x; j < seqlen_k; j += kSoftmaxThreads)
    s[j] = from_float<T>(j < key_end ? expf(to_float(s[j]) * scale - stats.m) * inv_l : 0.0f);
  if (lse && threadIdx.x == 0) lse[row] = stats.l > 0.0f ? stats.m + logf(stats.l) : -INFINITY;
}

// One cublasGemmStridedBatchedEx in column-major terms: C_i = op(A_i)·op(B_i).
struct Gemm {
  cublasOperation_t trans_a, trans_b;
  int m, n, k;
  const void* a;
  int64_t lda, stride_a;
  const void* b;
  int64_t ldb, stride_b;
  void* c;
  int64_t ldc, stride_c;
  int count;
};

void run_gemm(cublasHandle_t handle, DType dtype, const Gemm& g) {
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t type = cublas_type(dtype);
  check_cublas(cublasGemmStridedBatchedEx(handle, g.trans_a, g.trans_b, g.m, g.n, g.k, &one, g.a,
                                          type, int(g.lda), g.stride_a, g.b, type, int(g.ldb),
                                          g.stride_b, &zero, g.c, type, int(g.ldc), g.stride_c,
                                          g.count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

// cuBLAS wants a leading dimension of at least head_dim even where only one
// row is read; a single row's stride never matters, so it is raised there.
int64_t leading_dim(const char* name, const TensorRef& t, int rows, int head_dim) {
  const int64_t ld = rows == 1 ? std::max<int64_t>(t.row_stride, head_dim) : t.row_stride;
  if (ld < head_dim || ld > INT_MAX)
    fail(Status::unsupported, "standard (cuda): ", name, " row stride is ", ld,
         ", cuBLAS needs it in [head_dim (", head_dim, "), ", INT_MAX, "]");
  return ld;
}

const char* element_at(const TensorRef& t, int64_t offset, DType dtype) {
  return static_cast<const char*>(t.data) + offset * int64_t(dtype_size(dtype));
}

}  // namespace

struct StandardCuda::State {
  AttnParams p;
  int64_t ld_q = 0, ld_k = 0, ld_v = 0, ld_o = 0;
  void* scores = nullptr;
  void* workspace = nullptr;
  cublasHandle_t handle = nullptr;

  ~State() {
    if (handle) cublasDestroy(handle);
    if (scores) cudaFree(scores);
    if (workspace) cudaFree(workspace);
  }

  void scores_gemm(int b);
  void output_gemm(int b);
};

// S[hq] = Q[b, :, hq]·K[b, :, hk]ᵀ for every q head of batch b.
void StandardCuda::State::scores_gemm(int b) {
  const Sizes& s = p.sizes;
  const size_t elem = dtype_size(p.dtype);
  const bool mha = s.group() == 1;
  for (int hk = 0; hk < (mha ? 1 : s.heads_kv); ++hk) {
    const int hq0 = hk * s.group();
    Gemm g{CUBLAS_OP_T, CUBLAS_OP_N, s.seqlen_k, s.seqlen_q, s.head_dim,
           element_at(p.k, b * p.k.batch_stride + hk * p.k.head_stride, p.dtype),
           ld_k, mha ? p.k.head_stride : 0,
           element_at(p.q, b * p.q.batch_stride + hq0 * p.q.head_stride, p.dtype),
           ld_q, p.q.head_stride,
           static_cast<char*>(scores) + size_t(hq0) * s.seqlen_q * s.seqlen_k * elem,
           s.seqlen_k, int64_t(s.seqlen_q) * s.seqlen_k,
           mha ? s.heads_q : s.group()};
    run_gemm(handle, p.dtype, g);
  }
}

// O[b, :, hq] = P[hq]·V[b, :, hk] for every q head of batch b.
void StandardCuda::State::output_gemm(int b) {
  const Sizes& s = p.sizes;
  const size_t elem = dtype_size(p.dtype);
  const bool mha = s.group() == 1;
  for (int hk = 0; hk < (mha ? 1 : s.heads_kv); ++hk) {
    const int hq0 = hk * s.group();
    Gemm g{CUBLAS_OP_N, CUBLAS_OP_N, s.head_dim, s.seqlen_q, s.seqlen_k,
           element_at(p.v, b * p.v.batch_stride + hk * p.v.head_stride, p.dtype),
           ld_v, mha ? p.v.head_stride : 0,
           static_cast<const char*>(scores) + size_t(hq0) * s.seqlen_q * s.seqlen_k * elem,
           s.seqlen_k, int64_t(s.seqlen_q) * s.seqlen_k,
           const_cast<char*>(element_at(p.o, b * p.o.batch_stride + hq0 * p.o.head_stride,
                                        p.dtype)),
           ld_o, p.o.head_stride,
           mha ? s.heads_q : s.group()};
    run_gemm(handle, p.dtype, g);
  }
}

StandardCuda::StandardCuda(const AttnParams& p) : state_(std::make_unique<State>()) {
  State& st = *state_;
  const Sizes& s = p.sizes;
  st.p = p;
  st.ld_q = leading_dim("q", p.q, s.seqlen_q, s.head_dim);
  st.ld_k = leading_dim("k", p.k, s.seqlen_k, s.head_dim);
  st.ld_v = leading_dim("v", p.v, s.seqlen_k, s.head_dim);
  st.ld_o = leading_dim("out", p.o, s.seqlen_q, s.head_dim);
  tools::CurrentDevice device(p.device_index);
  const size_t total = standard_cuda_bytes(s, p.dtype);
  st.scores = allocate(total - kCublasWorkspaceBytes, total, "score matrix");
  st.workspace = allocate(kCublasWorkspaceBytes, total, "cuBLAS workspace");
  check_cublas(cublasCreate(&st.handle), "cublasCreate");
  check_cublas(cublasSetStream(st.handle, static_cast<cudaStream_t>(p.stream)), "cublasSetStream");
  check_cublas(cublasSetWorkspace(st.handle, st.workspace, kCublasWorkspaceBytes),
               "cublasSetWorkspace");
}

StandardCuda::~StandardCuda() = default;

void StandardCuda::run() {
  State& st = *state_;
  const AttnParams& p = st.p;
  const Sizes& s = p.sizes;
  tools::CurrentDevice device(p.device_index);
  const int64_t rows = int64_t(s.heads_q) * s.seqlen_q;
  if (rows > INT_MAX) fail(Status::unsupported, "standard (cuda): heads_q × seqlen_q is too large");
  for (int b = 0; b < s.batch; ++b) {
    st.scores_gemm(b);
    float* lse = p.softmax.lse ? p.softmax.lse + b * rows : nullptr;
    const auto softmax = [&](auto* scores) {
      softmax_kernel<<<unsigned(rows), kSoftmaxThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(
          scores, s.seqlen_k, p.mask, p.softmax.scale, lse);
    };
    if (p.dtype == DType::f32) softmax(static_cast<float*>(st.scores));
    else if (p.dtype == DType::f16) softmax(static_cast<__half*>(st.scores));
    else softmax(static_cast<__nv_bfloat16*>(st.scores));
    FLASHATTN_TOOLS_CUDA(cudaGetLastError());
    st.output_gemm(b);
  }
}

}  // namespace flashattn::baselines
