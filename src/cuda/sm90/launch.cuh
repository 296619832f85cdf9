// The launch of one instantiation of the Hopper forward: TMA descriptors for
// Q, K, V and the output, the kernel's parameters, and the grid (one block per
// query tile, or one per SM for the persistent tiles).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <optional>
#include <type_traits>

#include "core/mask.h"
#include "core/tail_split.h"
#include "cuda/backends.h"
#include "cuda/common/check.h"
#include "cuda/common/scratch.h"
#include "cuda/common/shared_memory_grant.h"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/sm90/forward.h"
#include "cuda/sm90/kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda::sm90 {

// Whether causal tiles go heads fastest (see tile_at). It pays when the
// grid is a few waves, so the tail of light tiles is a large share of the run,
// and the heads are few, so at least 4 blocks of each run at once and share its
// K and V in L2. On the H100: 16 heads, 2.7 waves +25% (d 64); 8 heads, 1.9
// waves +43% (d 128); 16 heads, 7.8 waves +4% (d 256). Beyond these limits it
// loses: 64 heads, 7.8 waves −17%; 16 heads, 15.5 waves −3%.
inline bool heads_fastest(const AttnParams& p, const TileGrid& grid) {
  constexpr int kMinBlocksPerHead = 4;
  constexpr int kMaxWaves = 12;
  const int sms = multiprocessors(p.device_index);
  const int64_t heads = int64_t(p.sizes.batch) * p.sizes.heads_q;
  return p.mask.bounded_above && heads * kMinBlocksPerHead <= sms &&
         int64_t(grid.dims.x) <= int64_t(kMaxWaves) * sms;
}

// Whether a problem runs on the persistent tiles (d 64 and 128): where a
// tile's key blocks are few, the next tile's Q and first products running
// under this one's end outweigh the smaller key block (128 against 176 at
// d 128). On the H100 at d 128, A/B in one process (v4.7): +17%/+27%
// (non-causal/causal) at 512 keys, +8%/+18% at 1024, −1%/+2% at 4096,
// −4%/−2% at 8192; at d 64 +4%/+9% at 512, −19% causal at 16384, where the
// static walk balances worse than the hardware's block scheduler. With two Q
// buffers and chained turns (v4.11), non-causal 2048 moved to the persistent
// tiles too: +6% at d 128, +3–4% at d 64, and a tie at 4096 (interleaved
// rounds, docs/perf/cuda_wgmma.md).
inline bool use_persistent(const AttnParams& p) {
  constexpr int kMaxKeysCausal = 4096;
  constexpr int kMaxKeys = 2048;
  return p.sizes.seqlen_k <= (p.mask.bounded_above ? kMaxKeysCausal : kMaxKeys);
}

// Whether two consumers' 128-row tiles beat three consumers' 192-row ones at
// d 64: where every tile walks at most two key blocks, so that the third
// consumer's extra products have too little to hide under. Measured on the
// H100 (A/B in one process, docs/perf/cuda_wgmma.md v4.18): +7% at 256 keys
// (causal, batch 64) and 197 keys (batch 256), and 0% at 128; −10% at 577,
// where three consumers stay.
template <class Narrow>
bool walks_few_key_blocks(const AttnParams& p) {
  return p.sizes.seqlen_k <= 2 * Narrow::kBlockN;
}

// Whether a grid of Tr's tiles fits in one wave, one block an SM (Tr: the one
// consumer's 64-row tiles, OneWaveTraitsFor).
template <class Tr>
bool fits_one_wave(const AttnParams& p) {
  const Sizes& s = p.sizes;
  return int64_t(query_tiles(s, Tr::kBlockM)) * s.batch * s.heads_q <=
         multiprocessors(p.device_index);
}

// Whether the tiles can run in pairs (Traits::kCluster): non-causal, where
// every tile of a head visits all its key blocks, and an even number of tiles
// per head, so that each pair holds two tiles of one head.
template <class Tr>
bool pairs_tiles(const AttnParams& p) {
  return !p.mask.bounded_above && query_tiles(p.sizes, Tr::kBlockM) % 2 == 0;
}

// A launch of `blocks` blocks of Tr's shape in clusters of Tr::kCluster
// along x; `cluster` holds the cluster shape the config points to.
template <class Tr>
cudaLaunchConfig_t launch_config(int blocks, cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = Tr::kCluster;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(Tr::kThreads);
  config.dynamicSmemBytes = Tr::kSmemBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = Tr::kCluster > 1 ? 1 : 0;
  return config;
}

// How many blocks of `kernel` the GPU holds at once: one per SM, or, paired,
// two per cluster that fits (two SMs of one GPC each), asked of the driver
// once per device.
template <class Tr, class Kernel>
int resident_blocks(const AttnParams& p, Kernel kernel) {
  const int sms = multiprocessors(p.device_index);
  if constexpr (Tr::kCluster == 1) {
    return sms;
  } else {
    constexpr int kDevicesKept = 64;
    static std::array<std::atomic<int>, kDevicesKept> kept{};
    const bool keep = p.device_index < kDevicesKept;
    if (keep && kept[p.device_index] > 0) return kept[p.device_index];
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config = launch_config<Tr>(sms - sms % Tr::kCluster, nullptr, cluster);
    int clusters = 0;
    FLASHATTN_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    const int blocks = std::max(clusters, 1) * Tr::kCluster;
    if (keep) kept[p.device_index] = blocks;
    return blocks;
  }
}

// Blocks of a persistent launch: one per resident block, at most one per tile;
// for causal tiles in per-head runs (not heads_fastest), a multiple of the run
// length where that idles at most an eighth of the SMs, so that every round of
// for_each_tile holds whole runs and a block's heavy and light tiles pair up.
// Non-causal, where each head's last tile is partial (and so cheaper), never
// a multiple of the tiles per head: for_each_tile would then hand every
// partial tile to the same few blocks, round after round, and the others'
// full tiles would set the time (d 64 at 1024 keys on 132 SMs: 24 full tiles
// for some blocks where the average is 21.5). Paired, an even number, so that
// every round hands out whole pairs (a pair's two tiles run in step, so a
// partial one costs what its full partner does).
template <class Tr>
int persistent_blocks(const AttnParams& p, const TileGrid& grid, bool heads_fastest,
                      int resident) {
  // Packed, the tiles come from a list heaviest first, not in per-head runs.
  if (p.seqs.packed()) {
    const int blocks = int(std::min<int64_t>(resident, grid.dims.x));
    return blocks - blocks % Tr::kCluster;
  }
  int blocks = resident;
  if (p.mask.bounded_above && !heads_fastest && 8 * (resident % grid.m_blocks) <= resident)
    blocks = resident - resident % grid.m_blocks;
  blocks = int(std::min<int64_t>(blocks, grid.dims.x));
  const bool partial_last_tile = p.sizes.seqlen_q % Tr::kBlockM != 0;
  if (Tr::kCluster == 1 && !p.mask.bounded_above && partial_last_tile && blocks < grid.dims.x &&
      blocks % grid.m_blocks == 0)
    blocks -= 1;
  return blocks - blocks % Tr::kCluster;
}

// The packed tiles with rows, heaviest first (KernelParams::packed_tiles), into
// `list`: at most one entry per kBlockM rows of the batch and one partial
// tile per sequence, after their number.
template <class Tr, bool kLowerEnds>
void order_packed_tiles(const AttnParams& p, KernelParams& kp, const Scratch& list) {
  order_packed_tiles_kernel<Tr, kLowerEnds><<<1, kOrderThreads, 0,
                                              static_cast<cudaStream_t>(p.stream)>>>(
      kp, static_cast<int32_t*>(list.data()));
  check_launch("cuda_wgmma order_packed_tiles_kernel");
  kp.packed_tiles = static_cast<const int32_t*>(list.data());
}

template <class Tr>
size_t packed_list_bytes(const AttnParams& p, const TileGrid& grid) {
  const int64_t entries = std::min<int64_t>(int64_t(p.sizes.batch) * grid.m_blocks,
                                            p.seqs.total_q / Tr::kBlockM + p.sizes.batch);
  return size_t(entries + 1) * sizeof(int32_t);
}

// The grid's last tiles split by keys (core/tail_split.h), where the
// kernel can (kSplitsTail) and every tile walks every key block: kp's split,
// its parts' partial results and arrival counts in `scratch` (the counts
// zeroed on the stream), and kp.tiles then counts the grid's blocks.
template <class Tr>
void split_tail(const AttnParams& p, KernelParams& kp, std::optional<Scratch>& scratch) {
  if (kp.mask.bounded_above || kp.mask.bounded_below) return;
  const int key_blocks = (p.sizes.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
  kp.tail = tail_split(kp.tiles, multiprocessors(p.device_index), key_blocks, kForwardTailCosts);
  if (kp.tail.parts == 1) return;
  const size_t count_bytes = size_t(kp.tiles - kp.tail.first) * Tr::kConsumers * sizeof(int);
  const size_t results_offset = (count_bytes + 255) / 256 * 256;
  scratch.emplace(results_offset + part_results_bytes<Tr>(kp.tail, kp.tiles), p.device_index,
                  p.stream);
  uint8_t* base = static_cast<uint8_t*>(scratch->data());
  kp.part_arrivals = reinterpret_cast<int*>(base);
  kp.part_results = reinterpret_cast<float4*>(base + results_offset);
  FLASHATTN_CUDA_CHECK(
      cudaMemsetAsync(kp.part_arrivals, 0, count_bytes, static_cast<cudaStream_t>(p.stream)));
  kp.tiles = int(kp.tail.blocks(kp.tiles));
}

// kPacked: p is a packed batch (core/seqlen.h). The maps then cover the
// tensors' own rows (one batch index of the total lengths), the grid the
// longest sequence's query tiles for every sequence and head, and the blocks
// take the tiles with rows from a list made on the stream first, heaviest
// first (order_packed_tiles).
template <typename T, class Tr, class Variant, bool kPacked = false>
void launch(const AttnParams& p) {
  const Sizes& s = p.sizes;
  const Sizes stored = storage_sizes(p);
  const TileGrid grid = make_tile_grid(s, Tr::kBlockM, Tr::kHeadDimV, "cuda_wgmma");
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // q and k of head_dim columns, v and out of head_dim_v: TMA fills the bucket's
  // columns past a tensor's own with zeros and stores drop them.
  const auto map = [&](const TensorRef& t, int cols, int seqlen, int heads, int box_rows) {
    return make_tensor_map(t, bf16, cols, seqlen, heads, stored.batch, box_rows);
  };
  KernelParams kp{};
  kp.q = map(p.q, s.head_dim, stored.seqlen_q, s.heads_q, Tr::kBlockM);
  kp.k = map(p.k, s.head_dim, stored.seqlen_k, s.heads_kv, Tr::kBoxRows);
  kp.v = map(p.v, s.head_dim_v, stored.seqlen_k, s.heads_kv, Tr::kBoxRows);
  kp.o = map(p.o, s.head_dim_v, stored.seqlen_q, s.heads_q, 64);
  kp.sizes = s;
  kp.mask = dense_mask(p);
  kp.scores = p.scores;
  kp.dropout = p.dropout;
  kp.lse = p.softmax.lse;
  kp.scale = p.softmax.scale;
  kp.scale_log2 = p.softmax.scale_log2;
  kp.m_blocks = grid.m_blocks;
  kp.by_m_blocks = FastDivisor(grid.m_blocks);
  kp.by_heads = FastDivisor(s.batch * s.heads_q);
  kp.by_heads_q = FastDivisor(s.heads_q);
  kp.by_group = FastDivisor(s.group());
  kp.row_shift = kPacked ? 0 : tile_row_shift<Tr::kBlockM>(p.mask.bounded_above, s.seqlen_q);
  kp.tiles = int(grid.dims.x);
  kp.heads_fastest = !kPacked && heads_fastest(p, grid);
  if constexpr (kPacked) {
    kp.cu_seqlens_q = p.seqs.cu_seqlens_q;
    kp.cu_seqlens_k = p.seqs.cu_seqlens_k;
    kp.rule = p.rule;
    kp.out = p.o;
    kp.total_q = p.seqs.total_q;
  }
  // Packed, the tile list; split, the parts' results. Each lives until the
  // kernel has run (its release is queued after it).
  std::optional<Scratch> list, parts;
  if constexpr (kPacked) {
    list.emplace(packed_list_bytes<Tr>(p, grid), p.device_index, p.stream);
    order_packed_tiles<Tr, Variant::kLowerEnds>(p, kp, *list);
  }
  if constexpr (kSplitsTail<Tr, Variant, kPacked>) split_tail<Tr>(p, kp, parts);
  const auto kernel = forward_kernel<T, Tr, Variant, kPacked>;
  grant_shared_memory(kernel, Tr::kSmemBytes);
  const int blocks =
      Tr::kPersistent
          ? persistent_blocks<Tr>(p, grid, kp.heads_fastest, resident_blocks<Tr>(p, kernel))
          : kp.tiles;
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config =
      launch_config<Tr>(blocks, static_cast<cudaStream_t>(p.stream), cluster);
  FLASHATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, kp));
  check_launch("cuda_wgmma forward_kernel");
}

// Plain attention (no variant) with both head dims at one bucket, its scores
// kHeadDimQK deep (traits.h's ScoresDepth): dense batches on the per-tile,
// one-wave, persistent, paired or short shapes (use_persistent and the rest), packed
// ones persistent where a dense batch of the longest sequence's lengths would
// be (there a block also skips the tiles past its sequences' rows in a few
// instructions, where a block per tile costs a launch), else per tile.
template <typename T, int kHeadDim, int kHeadDimQK>
void run_plain(const AttnParams& p) {
  using PerTile = typename ScoresDepth<typename TraitsFor<kHeadDim>::type, kHeadDimQK>::type;
  using Persistent =
      typename ScoresDepth<typename PersistentTraitsFor<kHeadDim>::type, kHeadDimQK>::type;
  using Paired = typename ScoresDepth<typename PairedTraitsFor<kHeadDim>::type, kHeadDimQK>::type;
  using Short = typename ScoresDepth<typename ShortTraitsFor<kHeadDim>::type, kHeadDimQK>::type;
  using OneWave = typename ScoresDepth<typename OneWaveTraitsFor<kHeadDim>::type, kHeadDimQK>::type;
  if (p.seqs.packed()) {
    if constexpr (!std::is_void_v<Persistent>) {
      if (use_persistent(p)) return launch<T, Persistent, NoVariant, true>(p);
    }
    return launch<T, PerTile, NoVariant, true>(p);
  }
  if constexpr (!std::is_void_v<OneWave>) {
    if (fits_one_wave<OneWave>(p)) return launch<T, OneWave, NoVariant>(p);
  }
  if constexpr (!std::is_void_v<Persistent>) {
    if (use_persistent(p)) {
      if constexpr (!std::is_void_v<Paired>) {
        if (pairs_tiles<Paired>(p)) return launch<T, Paired, NoVariant>(p);
      }
      if constexpr (!std::is_void_v<Short>) {
        if (walks_few_key_blocks<Short>(p)) return launch<T, Short, NoVariant>(p);
      }
      return launch<T, Persistent, NoVariant>(p);
    }
  }
  launch<T, PerTile, NoVariant>(p);
}

// One instantiation of the forward (forward.h):
// - kHeadDimV < kHeadDim: v's own, narrower bucket, the plain per-tile kernel
//   alone (NarrowValueTraitsFor);
// - kHeadDimQK < kHeadDim: the plain kernels with shallower scores (run_plain);
// - else the plain kernels, or, where p asks for a variant, the one that takes
//   every variant (core/variant.h's AnyVariant16, on VariantTraitsFor; packed
//   batches too), every variant and dropout (DropoutVariant16), or every
//   variant and a bias (BiasVariant16; wgmma_unsupported refuses those two
//   with packed batches).
// forward.cu sends the first two plain attention only.
template <typename T, int kHeadDim, int kHeadDimV, int kHeadDimQK>
void run_forward(const AttnParams& p) {
  if constexpr (kHeadDimV != kHeadDim || kHeadDimQK != kHeadDim) {
    if (needs_any_variant(p))
      fail(Status::internal, "variants: cuda_wgmma's kernels of head dims ", kHeadDimQK, "/",
           kHeadDimV, " take plain attention only");
    if constexpr (kHeadDimV != kHeadDim) {
      using Narrow = typename NarrowValueTraitsFor<kHeadDim, kHeadDimV>::type;
      if (p.seqs.packed()) return launch<T, Narrow, NoVariant, true>(p);
      return launch<T, Narrow, NoVariant>(p);
    } else {
      run_plain<T, kHeadDim, kHeadDimQK>(p);
    }
  } else {
    using VariantTraits = typename VariantTraitsFor<kHeadDim>::type;
    if (p.seqs.packed() && needs_any_variant(p))
      return launch<T, VariantTraits, AnyVariant16, true>(p);
    if (p.scores.bias.data) return launch<T, VariantTraits, BiasVariant16>(p);
    if (p.dropout.on()) return launch<T, VariantTraits, DropoutVariant16>(p);
    if (needs_any_variant(p)) return launch<T, VariantTraits, AnyVariant16>(p);
    run_plain<T, kHeadDim, kHeadDim>(p);
  }
}

}  // namespace flashattn::cuda::sm90
