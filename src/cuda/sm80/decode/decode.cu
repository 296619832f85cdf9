// cuda_mma's decode kernel: the split count, the instantiation for the dtype,
// head-dim bucket and variant, and the launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/device.h"
#include "cuda/sm80/decode/decode.h"
#include "cuda/sm80/decode/decode_kernel.cuh"

namespace flashattn::cuda::decode {
namespace {

constexpr int kHeadDimBuckets[] = {64, 128, 256};
static_assert(kHeadDimBuckets[2] == kMaxHeadDim);
constexpr int kMaxRows = 64;  // rows per kv head above which the cache runs on the prefill kernel

// Splits of each sequence's key blocks: enough blocks to fill the GPU's slots
// (blocks per SM × SMs) twice over, no split with fewer than two key blocks,
// at most kMaxKeySplits; or the caller's count.
int key_splits(const AttnParams& p, int64_t blocks, int blocks_per_sm) {
  const int key_blocks = std::max(1, (p.sizes.seqlen_k + kBlockN - 1) / kBlockN);
  const int asked = p.seqs.cache.key_splits;
  if (asked > 0) return std::min(asked, key_blocks);
  const int64_t slots = int64_t(multiprocessors(p.device_index)) * blocks_per_sm;
  if (blocks >= slots) return 1;
  const int64_t want = (2 * slots + blocks - 1) / blocks;
  return int(std::max<int64_t>(1, std::min<int64_t>({want, key_blocks / 2, kMaxKeySplits})));
}

template <typename T, int kD, class Variant>
void launch(const AttnParams& p) {
  using Shape = DecodeShape<kD>;
  const Sizes& s = p.sizes;
  const int row_tiles = (s.group() * s.seqlen_q + kRows - 1) / kRows;
  const int64_t blocks = int64_t(row_tiles) * s.heads_kv * s.batch;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "q: shape too large for cuda_mma's decode grid");
  bool vec16 = s.head_dim % 8 == 0;
  for (const TensorRef* t : {&p.q, &p.k, &p.v}) vec16 = vec16 && rows_16b_aligned(*t, 2);
  const auto kernel = decode_kernel<T, Shape, Variant>;
  FLASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Shape::kSmemBytes));
  const int splits = key_splits(p, blocks, Shape::kMinBlocks);
  run_key_splits(p, splits, [&](const KeySplit& split) {
    kernel<<<dim3(unsigned(blocks), unsigned(split.count)), kThreads, Shape::kSmemBytes,
             static_cast<cudaStream_t>(p.stream)>>>(p, split, row_tiles, vec16);
    check_launch("cuda_mma decode_kernel");
  });
}

template <typename T, int kD>
void run_variant(const AttnParams& p) {
  if (needs_any_variant(p)) launch<T, kD, AnyVariant16>(p);
  else launch<T, kD, NoVariant>(p);
}

template <typename T>
void run_bucket(const AttnParams& p) {
  switch (head_dim_bucket(kHeadDimBuckets, p.sizes.head_dim)) {
    case 64: run_variant<T, 64>(p); return;
    case 128: run_variant<T, 128>(p); return;
    case 256: run_variant<T, 256>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.head_dim, " reached cuda_mma's decode kernel");
}

}  // namespace

bool takes(const AttnParams& p) {
  const KeyCache& c = p.seqs.cache;
  if (!c.present() || p.dtype == DType::f32 || p.sizes.head_dim > kMaxHeadDim) return false;
  return c.paged() || !c.checked || int64_t(p.sizes.group()) * p.sizes.seqlen_q <= kMaxRows;
}

void forward(const AttnParams& p) {
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(p);
  else run_bucket<__half>(p);
}

}  // namespace flashattn::cuda::decode
