// cuda_wgmma's backward: what it can run, and the instantiation for the dtype
// and head-dim bucket.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "cuda/backends.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/sm90/backward.h"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda {
namespace {

template <typename T, int kHeadDim>
void run_layout(const BwdParams& p) {
  if (p.seqs.packed()) sm90::run_packed_backward<T, kHeadDim>(p);
  else sm90::run_backward<T, kHeadDim>(p);
}

template <typename T>
void run_bucket(const BwdParams& p) {
  // Two head dims run at the wider one's bucket: the narrower one's columns
  // past its width are TMA's zeros. For plain attention in the 256 bucket with
  // q's and k's head_dim at most 192, kernels that skip products on the zeros:
  // Sᵀ 192 deep, and dPᵀ 128 deep (multi-head latent attention's v) or 192.
  const Sizes& s = p.sizes;
  const int bucket = head_dim_bucket(sm90::kBackwardHeadDimBuckets, s.widest_head_dim());
  if (bucket == 256 && !needs_any_variant(p) && s.head_dim <= 192) {
    if (s.head_dim_v <= 128) return sm90::run_narrow_backward<T, 256, 128, 192>(p);
    if (s.head_dim_v <= 192) return sm90::run_narrow_backward<T, 256, 192, 192>(p);
  }
  switch (bucket) {
    case 64: run_layout<T, 64>(p); return;
    case 128: run_layout<T, 128>(p); return;
    case 256: run_layout<T, 256>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.widest_head_dim(),
       " reached cuda_wgmma's backward above its limit");
}

}  // namespace

// The forward's rules (device, head_dim a multiple of 8, TMA-describable q, k,
// v and out, as the forward checks them) and TMA's for the tensors only the
// backward touches: dout read, dk and dv written (packed: over the tensors'
// own rows). dq is written by write_dq, which takes any strides.
std::string wgmma_backward_unsupported(const BwdParams& p) {
  std::string why = wgmma_unsupported(p);
  if (!why.empty()) return why;
#ifdef FLASHATTN_HAS_SM90A
  const Sizes s = storage_sizes(p);
  const struct {
    const TensorRef* tensor;
    const char* name;
    int seqlen, heads;
  } tensors[] = {{&p.grad.dout, "dout", s.seqlen_q, s.heads_q},
                 {&p.grad.dk, "dk", s.seqlen_k, s.heads_kv},
                 {&p.grad.dv, "dv", s.seqlen_k, s.heads_kv}};
  for (const auto& t : tensors) {
    why = sm90::tma_unsupported(*t.tensor, t.name, t.seqlen, t.heads, s.batch);
    if (!why.empty()) return why;
  }
#endif
  return {};
}

void wgmma_backward(const BwdParams& p) {
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(p);
  else if (p.dtype == DType::f16) run_bucket<__half>(p);
  else fail(Status::internal, "dtype: cuda_wgmma takes f16 or bf16");
}

}  // namespace flashattn::cuda
