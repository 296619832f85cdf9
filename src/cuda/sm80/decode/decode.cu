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

// Splits of each sequence's key blocks (or the caller's count). Blocks run in
// waves of `slots` (blocks per SM × SMs) at a rate the copy bandwidth shares
// among them, so a split count is costed as waves × (key blocks per split +
// a block's start and end), plus the merge when the keys are split; the
// cheapest count up to kMaxKeySplits is taken. A count that only rounds the
// grid up to one more wave costs a whole wave: this is what keeps the grid at
// whole waves.
int key_splits(const AttnParams& p, int64_t blocks, int blocks_per_sm) {
  const int key_blocks = std::max(1, (p.sizes.seqlen_k + kBlockN - 1) / kBlockN);
  const int asked = p.seqs.cache.key_splits;
  if (asked > 0) return std::min(asked, key_blocks);
  constexpr double kBlockOverhead = 1.0;  // in key blocks: pipeline fill, the warps' merge
  constexpr double kMergeCost = 1.0;      // the split merge, in key blocks
  const int64_t slots = int64_t(multiprocessors(p.device_index)) * blocks_per_sm;
  int best = 1;
  double best_cost = 0.0;
  for (int splits = 1; splits <= std::min(key_blocks, kMaxKeySplits); ++splits) {
    const int64_t waves = (blocks * splits + slots - 1) / slots;
    const int per_split = (key_blocks + splits - 1) / splits;
    const double cost =
        double(waves) * (per_split + kBlockOverhead) + (splits > 1 ? kMergeCost : 0.0);
    if (splits == 1 || cost < best_cost) best = splits, best_cost = cost;
  }
  return best;
}

// Whether every row the kernel reads (q, k, v and the new keys) is 16-byte
// aligned and head_dim a multiple of 8: the kernel's copies are then 16 bytes.
bool rows_aligned(const AttnParams& p) {
  bool aligned = p.sizes.head_dim % 8 == 0;
  for (const TensorRef* t : {&p.q, &p.k, &p.v}) aligned = aligned && rows_16b_aligned(*t, 2);
  if (p.new_keys.rows > 0)
    for (const TensorRef* t : {&p.new_keys.k, &p.new_keys.v})
      aligned = aligned && rows_16b_aligned(*t, 2);
  return aligned;
}

template <typename T, int kD, class Variant>
void launch(const AttnParams& p) {
  using Shape = DecodeShape<kD>;
  const Sizes& s = p.sizes;
  const int row_tiles = (s.group() * s.seqlen_q + kRows - 1) / kRows;
  const int64_t blocks = int64_t(row_tiles) * s.heads_kv * s.batch;
  if (blocks > 0x7FFFFFFF) fail(Status::unsupported, "q: shape too large for cuda_mma's decode grid");
  const bool vec16 = rows_aligned(p);
  const bool append = vec16 && p.new_keys.rows > 0;
  const auto kernel = decode_kernel<T, Shape, Variant>;
  FLASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Shape::kSmemBytes));
  const int splits = key_splits(p, blocks, Shape::kMinBlocks);
  run_key_splits(p, splits, [&](const KeySplit& split) {
    kernel<<<dim3(unsigned(blocks), unsigned(split.count)), kThreads, Shape::kSmemBytes,
             static_cast<cudaStream_t>(p.stream)>>>(p, split, row_tiles, vec16,
                                                                    append);
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
  if (!c.present() || p.dtype == DType::f32 || p.sizes.head_dim > kMaxHeadDim ||
      p.sizes.head_dim_v != p.sizes.head_dim)
    return false;
  return c.paged() || !c.checked || int64_t(p.sizes.group()) * p.sizes.seqlen_q <= kMaxRows;
}

bool appends_new_keys(const AttnParams& p) {
  return takes(p) && p.new_keys.rows > 0 && rows_aligned(p);
}

void forward(const AttnParams& p) {
  if (p.dtype == DType::bf16) run_bucket<__nv_bfloat16>(p);
  else run_bucket<__half>(p);
}

}  // namespace flashattn::cuda::decode
