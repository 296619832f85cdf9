// cuda_mma's decode kernel: the split count, the instantiation for the dtype,
// head-dim bucket and variant, and the launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/head_dim_bucket.h"
#include "cuda/common/launch.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/device.h"
#include "cuda/sm80/decode/decode.h"
#include "cuda/sm80/decode/decode_kernel.cuh"

namespace flashattn::cuda::decode {
namespace {

constexpr int kHeadDimBuckets[] = {64, 128, 256};
static_assert(kHeadDimBuckets[2] == kMaxHeadDim);
constexpr int kMaxRows = 64;  // rows per kv head above which the cache runs on the prefill kernel

// How the keys split: count splits, merged by the merge kernel or, where the
// device takes the splits of a tile as one cluster, in the cluster.
struct SplitChoice {
  int count = 1;
  bool in_cluster = false;
};

// Splits of each sequence's key blocks (or the caller's count), costed in the
// time a lone block takes per key block. Blocks run in waves of `slots`
// (blocks per SM × SMs); up to one block per SM each streams at that rate,
// more share the copy bandwidth, so a wave of R blocks takes (key blocks per
// split) × max(1, R / SMs), plus a block's start and end. Splits add their
// merge: the merge kernel reads every partial row back from global memory
// after a launch of its own; a cluster's merge reads its neighbours' shared
// memory. Clusters are taken where the grid fits at one block per SM and the
// device keeps that many clusters resident (cluster_slots(splits): the blocks
// that clusters of that many splits keep resident, 0 where it takes none);
// with more, on the H200, clusters of 4 or more ran slower than the same
// splits merged by the kernel. Paged caches take clusters where the kernel
// addresses them a page at a time (pages of whole key blocks, or of 16 or 32
// keys), stepping the rows as a contiguous cache's; with a page lookup per
// row, one block per SM streamed a paged cache 1.4× slower than a contiguous
// one (B8 × 8k keys in 2 splits on the H200), so other pages take none. The
// cheapest count up to kMaxKeySplits is taken. (Costed by keys per split
// alone, B1 × 8k keys took 32 splits and the merge kernel, 27.0 µs on the
// H200, where 16 in clusters take 23.1.)
template <typename ClusterSlots>
SplitChoice key_splits(const AttnParams& p, int64_t blocks, int blocks_per_sm,
                       ClusterSlots&& cluster_slots) {
  const int key_blocks = std::max(1, (p.sizes.seqlen_k + kBlockN - 1) / kBlockN);
  const int sms = multiprocessors(p.device_index);
  const auto clustered = [&](int splits) {
    const KeyCache& c = p.seqs.cache;
    return (!c.paged() || pages_addressed_whole(c)) && splits > 1 &&
           splits <= kMaxClusterSplits && blocks * splits <= sms &&
           blocks * splits <= cluster_slots(splits);
  };
  const int asked = p.seqs.cache.key_splits;
  if (asked > 0) {
    const int splits = std::min(asked, key_blocks);
    return {splits, clustered(splits)};
  }
  constexpr double kBlockOverhead = 1.0;      // pipeline fill, the warps' merge
  constexpr double kMergeCost = 4.0;          // the merge kernel
  constexpr double kClusterMergeCost = 0.5;   // the merge in a cluster
  const int64_t slots = int64_t(sms) * blocks_per_sm;
  const auto cost = [&](int splits, double merge) {
    const int per_split = (key_blocks + splits - 1) / splits;
    const auto wave = [&](int64_t resident) {
      return per_split * std::max(1.0, double(resident) / sms) + kBlockOverhead;
    };
    const int64_t grid = blocks * splits, rest = grid % slots;
    return double(grid / slots) * wave(slots) + (rest > 0 ? wave(rest) : 0.0) + merge;
  };
  SplitChoice best;
  double best_cost = cost(1, 0.0);
  for (int splits = 2; splits <= std::min(key_blocks, kMaxKeySplits); ++splits) {
    const bool in_cluster = clustered(splits);
    const double c = cost(splits, in_cluster ? kClusterMergeCost : kMergeCost);
    if (c < best_cost) best = {splits, in_cluster}, best_cost = c;
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
  const auto divisors = [&](int splits) {
    return DecodeGrid{FastDivisor(row_tiles), FastDivisor(s.heads_kv), FastDivisor(s.group()),
                      FastDivisor(splits)};
  };
  grant_shared_memory(kernel, Shape::kSmemBytes);
  const auto slots = [&](int splits) {
    return cluster_slots(kernel, splits, kThreads, Shape::kSmemBytes, p.device_index);
  };
  const SplitChoice choice = key_splits(p, blocks, Shape::kMinBlocks, slots);
  const dim3 grid(unsigned(blocks), unsigned(choice.count));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (choice.in_cluster) {
    KeySplit split;
    split.count = choice.count;
    split.in_cluster = true;
    KernelLaunch(grid, kThreads, Shape::kSmemBytes, stream)
        .cluster_y(choice.count)(kernel, "cuda_mma decode_kernel", p, split,
                                 divisors(choice.count), vec16, append);
    return;
  }
  run_key_splits(p, choice.count, [&](const KeySplit& split) {
    kernel<<<grid, kThreads, Shape::kSmemBytes, stream>>>(p, split, divisors(split.count), vec16,
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
