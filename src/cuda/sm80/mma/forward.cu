// cuda_mma: picks the instantiation for the dtype and head-dim bucket.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/sm80/decode/decode.h"
#include "cuda/sm80/mma/forward.h"

namespace flashattn::cuda {
namespace {

template <typename T>
void run_bucket(const AttnParams& p) {
  // Q and K, and V, zero-padded to the bucket of the wider head dim.
  switch (head_dim_bucket(mma::kHeadDimBuckets, p.sizes.widest_head_dim())) {
    case 32: mma::run_forward<T, 32>(p); return;
    case 64: mma::run_forward<T, 64>(p); return;
    case 96: mma::run_forward<T, 96>(p); return;
    case 128: mma::run_forward<T, 128>(p); return;
    case 192: mma::run_forward<T, 192>(p); return;
    case 256: mma::run_forward<T, 256>(p); return;
    case 512: mma::run_forward<T, 512>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.widest_head_dim(), " reached cuda_mma above its limit");
}

}  // namespace

bool forward_appends(void (*forward)(const AttnParams&), const AttnParams& p) {
  return forward == &mma_forward && decode::appends_new_keys(p);
}

void mma_forward(const AttnParams& p) {
  if (decode::takes(p)) return decode::forward(p);
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(p);
  else if (p.dtype == DType::f16) run_bucket<__half>(p);
  else fail(Status::internal, "dtype: cuda_mma takes f16 or bf16");
}

}  // namespace flashattn::cuda
