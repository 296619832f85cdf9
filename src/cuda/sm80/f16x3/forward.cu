// cuda_f16x3: splits K and V, picks the key splits, runs the attention kernel
// (launched while the split runs, common/launch.h) and, where the keys were
// split, the merge; head dims above 128 go to the wide-head path (wide_forward.cu).
#include <algorithm>

#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/common/launch.h"
#include "cuda/common/scratch.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/sm80/f16x3/kernel.cuh"
#include "cuda/sm80/f16x3/wide.h"

namespace flashattn::cuda {
namespace f16x3 {
namespace {

constexpr int kHeadDims[] = {32, 64, 128};
static_assert(kWideHeadDims[2] == kF16x3MaxHeadDim);

template <class Variant, typename Shape>
void run_attention(const AttnParams& p, TileGrid grid, bool vec4, const SplitKV& kv,
                   const KeySplit& split) {
  const int smem = int(sizeof(SharedTiles<Shape>));
  const auto kernel = attention_kernel<Variant, Shape>;
  grant_shared_memory(kernel, smem);
  grid.dims.y = unsigned(split.count);
  KernelLaunch(grid.dims, Shape::kThreads, smem, static_cast<cudaStream_t>(p.stream))
      .early_where(runs_sm90a_code(p.device_index))(kernel, "cuda_f16x3 attention_kernel", p,
                                                    grid.divisors, vec4, kv, split);
}

// A grid under two blocks per SM splits the keys over as many blocks per query
// tile as keep it within two blocks per SM (one wave), at most kF16x3MaxKeySplits,
// each taking at least two key blocks.
template <int kD>
void run(const AttnParams& p) {
  constexpr int kBlockN = kBlockNFor<kD>;
  const Sizes& s = p.sizes;
  const bool vec4 = fp32_rows_vec4(p);

  const int key_blocks = (s.seqlen_k + kBlockN - 1) / kBlockN;
  const int64_t kv_heads = int64_t(s.batch) * s.heads_kv;
  if (kv_heads * key_blocks > 0x7FFFFFFF)
    fail(Status::unsupported, "k: shape too large for cuda_f16x3's grid");
  const size_t halves = size_t(kv_heads) * key_blocks * kBlockN * kD;  // per array
  const size_t scales = size_t(kv_heads) * key_blocks * (1 + kD / 8);
  Scratch kv_scratch(4 * halves * sizeof(uint16_t) + scales * sizeof(float), p.device_index,
                     p.stream);
  auto* h = static_cast<uint16_t*>(kv_scratch.data());
  SplitKV kv{h, h + halves, h + 2 * halves, h + 3 * halves, nullptr, nullptr, key_blocks * kBlockN};
  kv.k_unscale = reinterpret_cast<float*>(h + 4 * halves);
  kv.v_unscale = kv.k_unscale + kv_heads * key_blocks;
  split_kv_kernel<kD, kBlockN><<<unsigned(kv_heads * key_blocks), kSplitThreads, 0,
                                 static_cast<cudaStream_t>(p.stream)>>>(p, kv, vec4);
  check_launch("cuda_f16x3 split_kv_kernel");

  using Shape = ShapeFor<kD>;
  const TileGrid grid = make_tile_grid(s, Shape::kBlockM, kD, "cuda_f16x3");
  const int64_t wanted = 2 * int64_t(multiprocessors(p.device_index)) / grid.dims.x;
  const int splits = int(std::min<int64_t>({wanted, kF16x3MaxKeySplits, key_blocks / 2}));
  run_key_splits(p, splits, [&](const KeySplit& split) {
    with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) {
      run_attention<decltype(variant), Shape>(p, grid, vec4, kv, split);
    });
  });
}

}  // namespace
}  // namespace f16x3

void f16x3_forward(const AttnParams& p) {
  switch (head_dim_bucket(f16x3::kHeadDims, p.sizes.head_dim)) {
    case 32: f16x3::run<32>(p); return;
    case 64: f16x3::run<64>(p); return;
    case 128: f16x3::run<128>(p); return;
  }
  f16x3::wide_forward(p);
}

}  // namespace flashattn::cuda
