// cuda_wgmma: what it can run, and the instantiation for the dtype and
// head-dim bucket.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/sm90/aligned_kv.h"
#include "cuda/sm90/forward.h"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda {
namespace {

template <typename T>
void run_bucket(const AttnParams& p) {
  // Q and K, and V, zero-padded (TMA's fill) to the bucket of the wider head
  // dim. For plain attention, kernels that skip products on the padding: at
  // q's 192 and v's 128 (multi-head latent attention) each at its own bucket,
  // and Q·Kᵀ only as deep as q's head_dim where that is at most 48 in the 64
  // bucket (40), 80 or 96 in the 128 (72, 80, 96), 160 in the 192; in the 384,
  // where q's and v's head dims are both at most 288 or 320, Q·Kᵀ that deep and
  // P·V that wide, in uneven shares of the two consumers (traits.h's
  // kFirstAccCols).
  const Sizes& s = p.sizes;
  const int bucket = head_dim_bucket(sm90::kHeadDimBuckets, s.widest_head_dim());
  if (!needs_any_variant(p)) {
    if (bucket == 192 && head_dim_bucket(sm90::kHeadDimBuckets, s.head_dim_v) == 128)
      return sm90::run_forward<T, 192, 128>(p);
    if (bucket == 64 && s.head_dim <= 48) return sm90::run_forward<T, 64, 64, 48>(p);
    if (bucket == 128 && s.head_dim <= 80) return sm90::run_forward<T, 128, 128, 80>(p);
    if (bucket == 128 && s.head_dim <= 96) return sm90::run_forward<T, 128, 128, 96>(p);
    if (bucket == 192 && s.head_dim <= 160) return sm90::run_forward<T, 192, 192, 160>(p);
    if (bucket == 384 && s.widest_head_dim() <= 288) return sm90::run_forward<T, 384, 384, 288>(p);
    if (bucket == 384 && s.widest_head_dim() <= 320) return sm90::run_forward<T, 384, 384, 320>(p);
  }
  switch (bucket) {
    case 64: sm90::run_forward<T, 64>(p); return;
    case 128: sm90::run_forward<T, 128>(p); return;
    case 192: sm90::run_forward<T, 192>(p); return;
    case 256: sm90::run_forward<T, 256>(p); return;
    case 384: sm90::run_forward<T, 384>(p); return;
    case 512: sm90::run_forward<T, 512>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.widest_head_dim(),
       " reached cuda_wgmma above its limit");
}

}  // namespace

std::string wgmma_unsupported(const AttnParams& p) {
#ifndef FLASHATTN_HAS_SM90A
  (void)p;
  return "backend: cuda_wgmma is not built (FLASHATTN_CUDA_ARCHS lacks 90a)";
#else
  const int cc = compute_capability(p.device_index);
  if (cc != 90)
    return "q: cuda device " + std::to_string(p.device_index) + " has compute capability " +
           std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
           "; cuda_wgmma runs on 9.0 (Hopper) only";
  // Packed, the tensors hold one batch index of the total lengths.
  const Sizes s = storage_sizes(p);
  if (p.seqs.packed() && p.scores.bias.data != nullptr)
    return "variants.bias: cuda_wgmma does not take a bias or boolean mask with variable-length "
           "batches";
  if (p.seqs.packed() && p.dropout.on())
    return "variants.dropout: cuda_wgmma does not take dropout with variable-length batches";
  if (s.head_dim % 8 != 0)
    return "q: head_dim " + std::to_string(s.head_dim) +
           " is not a multiple of 8, as cuda_wgmma's TMA rows need";
  if (s.head_dim_v % 8 != 0)
    return "v: head_dim " + std::to_string(s.head_dim_v) +
           " is not a multiple of 8, as cuda_wgmma's TMA rows need";
  // The kernels' key ranges are in 32-bit arithmetic (core/mask.h, kSmallSeqlen).
  if (!RowMask::small(s.seqlen_q, 0))
    return "q: seqlen " + std::to_string(s.seqlen_q) + " is not below 2^29, as cuda_wgmma needs";
  if (!RowMask::small(0, s.seqlen_k))
    return "k: seqlen " + std::to_string(s.seqlen_k) + " is not below 2^29, as cuda_wgmma needs";
  const struct {
    const TensorRef* tensor;
    const char* name;
    int seqlen, heads;
  } tensors[] = {{&p.q, "q", s.seqlen_q, s.heads_q},
                 {&p.k, "k", s.seqlen_k, s.heads_kv},
                 {&p.v, "v", s.seqlen_k, s.heads_kv},
                 {&p.o, "out", s.seqlen_q, s.heads_q}};
  for (const auto& t : tensors) {
    std::string why = sm90::tma_unsupported(*t.tensor, t.name, t.seqlen, t.heads, s.batch);
    if (!why.empty()) return why;
  }
  return {};
#endif
}

void wgmma_forward(const AttnParams& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    fail(Status::internal, "dtype: cuda_wgmma takes f16 or bf16");
  // The aligned copies live until the kernels have run (their release is
  // queued after them).
  std::optional<Scratch> copies;
  const AttnParams aligned = sm90::with_aligned_kv(p, copies);
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(aligned);
  else run_bucket<__half>(aligned);
}

}  // namespace flashattn::cuda
