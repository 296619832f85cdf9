// cuda_mma's backward: picks the instantiation for the dtype and head-dim bucket.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "cuda/backends.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/sm80/mma/backward.h"

namespace flashattn::cuda {
namespace {

template <typename T>
void run_bucket(const BwdParams& p) {
  // Q, K and dQ, and V, dO and dV, zero-padded to the bucket of the wider head dim.
  switch (head_dim_bucket(mma::kBackwardHeadDimBuckets, p.sizes.widest_head_dim())) {
    case 32: mma::run_backward<T, 32>(p); return;
    case 64: mma::run_backward<T, 64>(p); return;
    case 128: mma::run_backward<T, 128>(p); return;
    case 256: mma::run_backward<T, 256>(p); return;
    case 512: mma::run_backward<T, 512>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.widest_head_dim(),
       " reached cuda_mma's backward above its limit");
}

}  // namespace

void mma_backward(const BwdParams& p) {
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(p);
  else if (p.dtype == DType::f16) run_bucket<__half>(p);
  else fail(Status::internal, "dtype: cuda_mma takes f16 or bf16");
}

}  // namespace flashattn::cuda
