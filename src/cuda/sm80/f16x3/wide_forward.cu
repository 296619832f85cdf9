// cuda_f16x3 for wide heads: splits K and V into fragment order, picks the key
// splits, runs the wide attention kernel and, where the keys were split, the merge.
#include <algorithm>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/fp32_tile.cuh"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/common/launch.h"
#include "cuda/common/scratch.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/sm80/f16x3/wide.h"
#include "cuda/sm80/f16x3/wide_kernel.cuh"

namespace flashattn::cuda::f16x3 {
namespace {

// The grid's blocks take up to kF16x3MaxKeySplits key splits each, as many as keep
// it within one wave of resident blocks. The kernel is launched while the split
// kernel runs (common/launch.h) and waits for it in the kernel. (Merging a
// tile's splits in a cluster, as decode does, would need all 32 × 4 blocks of
// head dim 1024's 1000 rows resident as clusters of 4: the H200 keeps 120.)
template <class Variant, typename Shape>
void run_attention(const AttnParams& p, TileGrid grid, int chunks, int smem, bool vec4,
                   const WideSplitKV& kv) {
  const auto kernel = wide_attention_kernel<Variant, Shape>;
  grant_shared_memory(kernel, smem);
  int per_sm = 0;
  FLASHATTN_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Shape::kThreads, smem));
  const int64_t resident = int64_t(std::max(per_sm, 1)) * multiprocessors(p.device_index);
  const int64_t wanted = resident / grid.dims.x;
  const int splits = int(std::max<int64_t>(1, std::min<int64_t>({wanted, kF16x3MaxKeySplits, chunks})));
  grid.dims.y = unsigned(splits);
  const bool sm90a = runs_sm90a_code(p.device_index);
  run_key_splits(p, splits, [&](const KeySplit& split) {
    KernelLaunch(grid.dims, Shape::kThreads, smem, static_cast<cudaStream_t>(p.stream))
        .early_where(sm90a)(kernel,
                            "cuda_f16x3 wide_attention_kernel", p, grid.divisors, vec4, kv, split);
  });
}

// K and V split into fragment order, then the attention kernel of p's Variant.
template <int kD>
void run(const AttnParams& p) {
  using Shape = WideShape<kD>;
  // Head dim 1024 keeps 213 KB of shared memory per block, which Hopper has and
  // Ampere (164 KB) and Ada (99 KB) have not: there the 3×TF32 kernel runs it.
  const int smem = int(sizeof(WideShared<Shape>));
  if (smem > shared_memory_per_block(p.device_index)) {
    tf32x3_forward(p);
    return;
  }
  const Sizes& s = p.sizes;
  const bool vec4 = fp32_rows_vec4(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  const int chunks = (s.seqlen_k + Shape::kChunk - 1) / Shape::kChunk;
  const int64_t kv_heads = int64_t(s.batch) * s.heads_kv;
  const int rows = chunks * Shape::kChunk;
  if (2 * kv_heads * (rows / 16) > 0x7FFFFFFF)
    fail(Status::unsupported, "k: shape too large for cuda_f16x3's grid");
  const size_t units = size_t(kv_heads) * (rows / 16) * (kD / 16);  // of K, and of V
  const size_t scales = size_t(kv_heads) * rows + units;
  Scratch kv_scratch(2 * units * sizeof(FragmentUnit) + scales * sizeof(float), p.device_index,
                     p.stream);
  auto* unit_base = static_cast<FragmentUnit*>(kv_scratch.data());
  WideSplitKV kv{unit_base, nullptr, nullptr, rows};
  kv.k_unscale = reinterpret_cast<float*>(unit_base + 2 * units);
  kv.v_unscale = kv.k_unscale + size_t(kv_heads) * rows;

  const int split_smem = int(sizeof(WideSplitStage<kD>));
  grant_shared_memory(wide_split_kernel<kD>, split_smem);
  wide_split_kernel<kD><<<unsigned(2 * kv_heads * (rows / 16)), kWideSplitThreads, split_smem,
                          stream>>>(p, kv, vec4);
  check_launch("cuda_f16x3 wide_split_kernel");

  const TileGrid grid = make_tile_grid(s, Shape::kBlockM, kD, "cuda_f16x3");
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) {
    run_attention<decltype(variant), Shape>(p, grid, chunks, smem, vec4, kv);
  });
}

}  // namespace

void wide_forward(const AttnParams& p) {
  switch (head_dim_bucket(kWideHeadDims, p.sizes.head_dim)) {
    case 256: run<256>(p); return;
    case 512: run<512>(p); return;
    case 1024: run<1024>(p); return;
  }
  fail(Status::internal, "head_dim: ", p.sizes.head_dim, " reached cuda_f16x3 above its limit");
}

}  // namespace flashattn::cuda::f16x3
