// The decode kernel of cuda_mma: few query rows against many keys (a KV-cache
// step, contiguous or paged), on mma.sync m16n8k16 with fp32 accumulation.
//
// Rows. A block takes 16 rows of one (sequence, kv head): the query heads of
// the kv head's GQA group times the query rows, packed as r = i·group + j (query
// row i, head hk·group + j), so a group's heads share every K and V load. More
// rows than 16 take more blocks.
//
// Keys. Key blocks of kBlockN = 16·kWarps keys stream through a ring of kStages
// shared-memory stages (cp.async, one barrier per block); warp w takes keys
// [16w, 16w + 16) of each block, with its own running max, sum and output
// accumulator over all 16 rows (the online softmax of sm80/softmax.cuh). At the
// end the warps' partial rows merge through shared memory by their maxima. The
// key blocks a block walks may be one split of the sequence's (split-KV, blockIdx.y):
// each split then writes its rows normalised, with their lse, for the merge of
// common/combine.h; or, on sm_90, the splits of a tile run as one thread-block
// cluster and merge there (common/cluster_merge.cuh), without the merge kernel, its
// launch and the partials' trip through global memory.
//
// Keys are addressed row by row, so a paged cache's pages need not be a
// multiple of the key block; pages of whole key blocks, and of 16 or 32 keys,
// are addressed a page at a time. A call's new keys and values are appended
// here too (when the rows are 16-byte aligned): one block per (sequence, kv head)
// writes them into the cache while the blocks that attend to them read them
// from the new tensors, which saves the separate append kernel's launch. An unchecked cache
// (KeyCache::checked false) is checked here: a sequence whose length does not
// fit or whose pages lie out of range gets NaN rows and lse, and nothing outside
// the tensors is read.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/params.h"
#include "core/softmax.h"
#include "cuda/common/cluster_merge.cuh"
#include "cuda/common/combine.h"
#include "cuda/common/element.cuh"
#include "cuda/common/fast_divisor.h"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/mma_16bit.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"

namespace flashattn::cuda::decode {

inline constexpr int kRows = 16;  // packed rows per block: one m16 slice
inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kWarpKeys = 16;
inline constexpr int kBlockN = kWarpKeys * kWarps;

// Whether each of a paged cache's pages holds whole key blocks: a block then lies
// in one page, found by one table load, and its rows step as a contiguous
// cache's do (KeyBlockLoader), so such caches also take clusters (decode.cu).
__host__ __device__ inline bool pages_hold_whole_blocks(const KeyCache& c) {
  return c.page_size % kBlockN == 0;
}

// Page sizes of a few keys that hold whole passes of every head-dim bucket's
// loader (it copies 4 to 16 rows a pass) and tile a key block, so that the
// loader addresses them a page at a time (KeyBlockLoader::copy_small_pages).
template <int... kSizes>
struct PageSizes {
  __host__ __device__ static constexpr bool holds(int size) { return ((size == kSizes) || ...); }
  // Calls f(std::integral_constant<int, size>{}) where size is one of kSizes;
  // false where it is none.
  template <class F>
  __device__ static bool visit(int size, F&& f) {
    return ((size == kSizes && (f(std::integral_constant<int, kSizes>{}), true)) || ...);
  }
};
using SmallPageSizes = PageSizes<16, 32>;

__host__ __device__ inline bool pages_are_small_tiles(const KeyCache& c) {
  return SmallPageSizes::holds(c.page_size);
}

// Whether the kernel addresses a paged cache's rows a page at a time (not one
// lookup per row), as it steps a contiguous cache's: such caches also take
// clusters (decode.cu).
__host__ __device__ inline bool pages_addressed_whole(const KeyCache& c) {
  return pages_hold_whole_blocks(c) || pages_are_small_tiles(c);
}

template <int kD_>
struct DecodeShape {
  static constexpr int kD = kD_;
  // Stages in flight: with 2 blocks per SM up to d = 128, 3 stages hold 64–96 KB
  // of K and V per block in flight, which the copy bandwidth needs.
  static constexpr int kStages = kD <= 64 ? 4 : 3;
  static constexpr int kMinBlocks = kD <= 128 ? 2 : 1;
  using QTile = SmemTile<kRows, kD>;
  using KVTile = SmemTile<kBlockN, kD>;
  static constexpr int kStageBytes = 2 * KVTile::kBytes;  // K then V
  // The warps' partial rows at the end (max, sum, kD accumulators each), in
  // the stages' memory; accumulator rows kAccStride floats apart, so that the
  // eight rows a warp stores at once fall in different banks.
  static constexpr int kAccStride = kD + 8;
  static constexpr int kMergeBytes = kWarps * kRows * (kAccStride + 2) * 4;
  // Split over a cluster: the block's finished rows (kD outputs each) and
  // their lse after them, read by the cluster's other blocks.
  static constexpr int kSplitRowsBytes = kRows * (kD + 1) * 4;
  static_assert(kMergeBytes + kSplitRowsBytes <= kStages * kStageBytes);
  static constexpr int kSmemBytes = QTile::kBytes + kStages * kStageBytes;
  // What online_softmax and for_each_p_fragment (sm80/softmax.cuh) need of a
  // warp's tile: one m16 slice, 16 keys (two n8 columns), kD output columns.
  struct Warp {
    static constexpr int kMTiles = 1, kNTiles = 2, kOTiles = kD / 8, kBlockN = kWarpKeys;
    static constexpr bool kRowSumsShared = false;
  };
};

// The launch's divisors, set on the host: the row tiles of a (sequence, kv
// head), the kv heads, the GQA group and the key splits. A block's set-up runs
// before any of its copies is issued, so its divisions are multiply-highs.
struct DecodeGrid {
  FastDivisor row_tiles, heads_kv, group, splits;
};

// This block's rows and keys, computed once by thread 0 into shared memory.
struct DecodeBlock {
  int b, hk;
  int row0;      // first packed row (i·group + j) of the block
  int rows;      // packed rows that exist
  int first_query, last_query;
  int n_first, n_end;     // key blocks this block (this split) walks
  int key_lo, key_hi;     // their keys, clipped to the sequence
  int unmasked_begin, unmasked_end;  // blocks every row sees whole
  bool valid;    // an unchecked cache's length and pages are in range
  Sequence seq;
  RowMask mask;
};

// Which of the sequence's key blocks split `split` of `splits` walks: an equal
// share of [begin, end) in whole blocks.
__device__ __forceinline__ void split_blocks(int begin, int end, int split,
                                             const FastDivisor& splits, int& first, int& last) {
  const int per = splits.div(end - begin + int(splits.divisor) - 1);
  first = min(end, begin + split * per);
  last = min(end, first + per);
}

__device__ __forceinline__ DecodeBlock decode_block(const AttnParams& p, const DecodeGrid& grid) {
  const Sizes& s = p.sizes;
  int tile, hk;
  const int bh = grid.row_tiles.divmod(int(blockIdx.x), tile);
  DecodeBlock blk;
  blk.b = grid.heads_kv.divmod(bh, hk);
  blk.hk = hk;
  blk.row0 = tile * kRows;
  // The group's divisor is set on the host; s.group() would divide here.
  blk.rows = min(kRows, int(grid.group.divisor) * s.seqlen_q - blk.row0);
  const KeyCache& c = p.seqs.cache;
  blk.valid = !c.present() || c.checked || c.fits(c.seqlens[blk.b]);
  blk.seq = blk.valid ? sequence(p, blk.b) : Sequence{0, 0, s.seqlen_q, 0};
  blk.mask = row_mask(p, blk.seq);
  blk.first_query = grid.group.div(blk.row0);
  blk.last_query = grid.group.div(blk.row0 + blk.rows - 1);
  const int begin = blk.mask.key_begin(blk.first_query) / kBlockN;
  const int end = max(begin, (blk.mask.key_end(blk.last_query) + kBlockN - 1) / kBlockN);
  split_blocks(begin, end, int(blockIdx.y), grid.splits, blk.n_first, blk.n_end);
  blk.key_lo = blk.n_first * kBlockN;
  blk.key_hi = min(blk.seq.seqlen_k, blk.n_end * kBlockN);
  blk.unmasked_begin = (blk.mask.key_begin(blk.last_query) + kBlockN - 1) / kBlockN;
  blk.unmasked_end = blk.mask.key_end(blk.first_query) / kBlockN;
  return blk;
}

// An unchecked paged cache: whether every page the block's keys lie in is one
// of k's pages (the whole block together).
__device__ __forceinline__ bool pages_in_range(const AttnParams& p, const DecodeBlock& blk) {
  const KeyCache& c = p.seqs.cache;
  bool ok = true;
  if (c.paged() && !c.checked && blk.key_hi > blk.key_lo) {
    const int first = blk.key_lo / c.page_size, last = (blk.key_hi - 1) / c.page_size;
    for (int page = first + int(threadIdx.x); page <= last; page += kThreads)
      ok = ok && c.page_in_range(c.block_table[int64_t(blk.b) * c.pages_per_sequence + page]);
  }
  return __syncthreads_and(ok);
}

// Starts loading `rows` rows of 16-bit elements (zeros past `valid_rows` and
// past head_dim) into tile, row r from row_address(r); vec16: rows 16-byte
// aligned (cp.async), else element loads that finish on return.
template <typename Tile, typename RowAddress>
__device__ __forceinline__ void load_rows(char* tile, int valid_rows, int head_dim, bool vec16,
                                          RowAddress&& row_address) {
  constexpr int kChunks = Tile::kChunks;
  for (int e = int(threadIdx.x); e < Tile::kRowCount * kChunks; e += kThreads) {
    const int r = e / kChunks, chunk = e % kChunks;
    char* dst = tile + Tile::offset(r, chunk);
    const int n = r < valid_rows ? min(8, max(0, head_dim - 8 * chunk)) : 0;
    if (vec16) {
      const uint16_t* src = n > 0 ? row_address(r) + 8 * chunk : row_address(0);
      cp_async_16_partial(dst, src, 2 * n);
    } else {
      uint32_t words[4] = {0u, 0u, 0u, 0u};
      if (n > 0) {
        const uint16_t* src = row_address(r) + 8 * chunk;
        for (int k = 0; k < n; ++k) words[k / 2] |= uint32_t(src[k]) << (16 * (k % 2));
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
}

// A thread's share of a key block's K and V loads, for rows 16-byte aligned and
// head_dim a multiple of 8: one 16-byte column chunk of rows row_in,
// row_in + kRowsPerPass, ... of the block. Each row is addressed once for K
// and V together (a contiguous cache, or pages of whole key blocks or of
// SmallPageSizes: a pointer step per row; other pages: a page lookup per row,
// all issued before the copies), since per-chunk addressing kept the block's
// few warps on integer work instead of keeping bytes in flight.
template <typename Tile>
struct KeyBlockLoader {
  static constexpr int kRowsPerPass = kThreads / Tile::kChunks;
  static constexpr int kPasses = kBlockN / kRowsPerPass;
  static_assert(kThreads % Tile::kChunks == 0 && kBlockN % kRowsPerPass == 0);
  int row_in;
  bool in_head;  // this thread's column chunk lies inside head_dim
  int seqlen_k;
  const uint16_t* k_head;  // head hk, column 8·chunk: the sequence's row 0 (paged: the pool's)
  const uint16_t* v_head;
  const uint16_t* k_base;  // k's and v's first elements: the source of the copies of zeros
  const uint16_t* v_base;
  uint32_t dst0;  // this thread's chunk of row row_in in a tile
  // With the new keys appended by this kernel (decode_kernel's `append`), keys
  // from first_new on are read from p.new_keys, whose rows the cache does not
  // hold yet; else first_new is past every key.
  int first_new;
  const uint16_t* k_new;  // p.new_keys' head hk, column 8·chunk, sequence b's row 0
  const uint16_t* v_new;

  __device__ __forceinline__ KeyBlockLoader(const AttnParams& p, const DecodeBlock& blk,
                                            bool append) {
    row_in = int(threadIdx.x) / Tile::kChunks;
    const int chunk = int(threadIdx.x) % Tile::kChunks;
    in_head = 8 * chunk < p.sizes.head_dim;
    seqlen_k = blk.seq.seqlen_k;
    const bool paged = p.seqs.cache.paged();
    k_base = static_cast<const uint16_t*>(p.k.data);
    v_base = static_cast<const uint16_t*>(p.v.data);
    k_head = k_base + blk.hk * p.k.head_stride + 8 * chunk +
             (paged ? 0 : row_offset(p.k, blk.b, blk.seq.k_row0));
    v_head = v_base + blk.hk * p.v.head_stride + 8 * chunk +
             (paged ? 0 : row_offset(p.v, blk.b, blk.seq.k_row0));
    dst0 = Tile::offset(row_in, chunk);
    const NewKeys& add = p.new_keys;
    first_new = append ? seqlen_k - add.rows : INT_MAX;
    k_new = static_cast<const uint16_t*>(add.k.data) + row_offset(add.k, blk.b, 0) +
            blk.hk * add.k.head_stride + 8 * chunk;
    v_new = static_cast<const uint16_t*>(add.v.data) + row_offset(add.v, blk.b, 0) +
            blk.hk * add.v.head_stride + 8 * chunk;
  }

  // The tile offset of this thread's chunk in pass `pass`: with whole groups
  // of eight rows per pass the swizzle repeats, so it is dst0 plus whole rows.
  __device__ __forceinline__ uint32_t dst(int pass) const {
    if constexpr (kRowsPerPass % 8 == 0) return dst0 + uint32_t(pass * kRowsPerPass * 128);
    else return Tile::offset(row_in + pass * kRowsPerPass, int(threadIdx.x) % Tile::kChunks);
  }

  // Starts the copies of kCount passes from pass `first` of a key block whose
  // rows all exist and lie at one row stride apart, this thread's chunk of the
  // first pass's K and V rows at k_row and v_row.
  template <int kCount>
  __device__ __forceinline__ void copy_passes(const AttnParams& p, uint32_t k_tile, int first,
                                              const uint16_t* k_row, const uint16_t* v_row) const {
#pragma unroll
    for (int pass = first; pass < first + kCount; ++pass) {
      cp_async_16_whole(k_tile + dst(pass), k_row);
      cp_async_16_whole(k_tile + Tile::kBytes + dst(pass), v_row);
      k_row += kRowsPerPass * p.k.row_stride;
      v_row += kRowsPerPass * p.v.row_stride;
    }
  }

  // The copies of a whole key block whose rows all exist at one row stride apart.
  __device__ __forceinline__ void copy_whole_block(const AttnParams& p, uint32_t k_tile,
                                                   const uint16_t* k_row,
                                                   const uint16_t* v_row) const {
    copy_passes<kPasses>(p, k_tile, 0, k_row, v_row);
  }

  // Starts the copies of key block n, every row cached and every chunk inside
  // head_dim, from a paged cache whose pages of kPageSize keys hold whole passes
  // and tile the block: the pages' table loads issued together, then each page's
  // rows addressed once and stepped by the row stride. (A table load and two
  // 64-bit products per row held each copy's issue behind them: pages of 16 ran
  // 5–9% over the contiguous time, of 64 1–3%.)
  template <int kPageSize>
  __device__ __forceinline__ void copy_small_pages(const AttnParams& p, const int32_t* table,
                                                   uint32_t k_tile, int n) const {
    static_assert(kPageSize % kRowsPerPass == 0 && kBlockN % kPageSize == 0);
    constexpr int kPages = kBlockN / kPageSize, kPassesPerPage = kPageSize / kRowsPerPass;
    int32_t page[kPages];
#pragma unroll
    for (int j = 0; j < kPages; ++j) page[j] = __ldg(table + n * kPages + j);
#pragma unroll
    for (int j = 0; j < kPages; ++j)
      copy_passes<kPassesPerPage>(
          p, k_tile, j * kPassesPerPage,
          k_head + int64_t(page[j]) * p.k.batch_stride + row_in * p.k.row_stride,
          v_head + int64_t(page[j]) * p.v.batch_stride + row_in * p.v.row_stride);
  }

  // Starts the copies of key block n into the K tile at k_tile (a shared
  // address) and the V tile after it; rows past the sequence's keys and
  // columns past head_dim are zeros, rows from first_new on come from
  // p.new_keys.
  __device__ __forceinline__ void load(const AttnParams& p, const DecodeBlock& blk,
                                       uint32_t k_tile, int n) const {
    const KeyCache& c = p.seqs.cache;
    const int key0 = n * kBlockN + row_in;
    if (!c.paged()) {
      const uint16_t* k_row = k_head + key0 * p.k.row_stride;
      const uint16_t* v_row = v_head + key0 * p.v.row_stride;
      if (in_head && (n + 1) * kBlockN <= min(seqlen_k, first_new)) {
        // Every row of the block is a cached key, every chunk inside head_dim:
        // the copies without the per-row test and source selection (most blocks).
        copy_whole_block(p, k_tile, k_row, v_row);
        return;
      }
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int key = key0 + pass * kRowsPerPass;
        const bool zeros = !in_head || key >= seqlen_k, cached = key < first_new;
        const int64_t fresh = key - int64_t(first_new);  // the row of p.new_keys, if not cached
        const uint16_t* k_src = cached ? k_row : k_new + fresh * p.new_keys.k.row_stride;
        cp_async_16_or_zeros(k_tile + dst(pass), zeros ? k_base : k_src, zeros);
        const uint16_t* v_src = cached ? v_row : v_new + fresh * p.new_keys.v.row_stride;
        cp_async_16_or_zeros(k_tile + Tile::kBytes + dst(pass), zeros ? v_base : v_src, zeros);
        k_row += kRowsPerPass * p.k.row_stride;
        v_row += kRowsPerPass * p.v.row_stride;
      }
      return;
    }
    const int32_t* table = c.block_table + int64_t(blk.b) * c.pages_per_sequence;
    const int cached_end = min(seqlen_k, first_new);
    if (pages_hold_whole_blocks(c) && in_head && (n + 1) * kBlockN <= cached_end) {
      // Pages of whole key blocks: the block lies in one page, found by one
      // table load, and its rows step as a contiguous cache's do. A block alone
      // on its SM has no other warps to hide a per-row page lookup behind.
      const int blocks_per_page = c.page_size / kBlockN;
      const int slot = n / blocks_per_page;
      const int row = (n - slot * blocks_per_page) * kBlockN + row_in;
      const int64_t page_at = __ldg(table + slot);
      copy_whole_block(p, k_tile, k_head + page_at * p.k.batch_stride + row * p.k.row_stride,
                       v_head + page_at * p.v.batch_stride + row * p.v.row_stride);
      return;
    }
    // Pages of a few keys: one table load per page, then its rows step.
    if (in_head && (n + 1) * kBlockN <= cached_end &&
        SmallPageSizes::visit(c.page_size, [&](auto size) {
          copy_small_pages<decltype(size)::value>(p, table, k_tile, n);
        }))
      return;
    // Other paged blocks: the page of each cached row first (a running page and
    // offset, no division per row), so that the table's loads are in flight together.
    int slot = key0 / c.page_size, in_page = key0 - slot * c.page_size;
    int32_t page[kPasses];
    int row_in_page[kPasses];
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      if (pass > 0) {
        in_page += kRowsPerPass;
        while (in_page >= c.page_size) in_page -= c.page_size, ++slot;
      }
      page[pass] = in_head && key0 + pass * kRowsPerPass < cached_end ? __ldg(table + slot) : -1;
      row_in_page[pass] = in_page;
    }
    if (in_head && (n + 1) * kBlockN <= cached_end) {  // every row a cached key, as above
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int64_t page_at = page[pass];
        cp_async_16_whole(k_tile + dst(pass),
                          k_head + page_at * p.k.batch_stride + row_in_page[pass] * p.k.row_stride);
        cp_async_16_whole(k_tile + Tile::kBytes + dst(pass),
                          v_head + page_at * p.v.batch_stride + row_in_page[pass] * p.v.row_stride);
      }
      return;
    }
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int key = key0 + pass * kRowsPerPass;
      const bool zeros = !in_head || key >= seqlen_k;
      const int64_t page_at = page[pass], fresh = key - int64_t(first_new);
      // A row in range without a page is one of this call's new keys.
      cp_async_16_or_zeros(
          k_tile + dst(pass),
          zeros          ? k_base
          : page_at >= 0 ? k_head + page_at * p.k.batch_stride + row_in_page[pass] * p.k.row_stride
                         : k_new + fresh * p.new_keys.k.row_stride,
          zeros);
      cp_async_16_or_zeros(
          k_tile + Tile::kBytes + dst(pass),
          zeros          ? v_base
          : page_at >= 0 ? v_head + page_at * p.v.batch_stride + row_in_page[pass] * p.v.row_stride
                         : v_new + fresh * p.new_keys.v.row_stride,
          zeros);
    }
  }
};

// This call's new keys and values (p.new_keys, head_dim a multiple of 8 and
// rows 16-byte aligned) written into the cache at the sequence's length, for
// kv head blk.hk: one block of each (sequence, kv head) does it, while the
// blocks that attend to those keys read them from p.new_keys. As
// append_to_cache (cuda/kv_append.cu), a sequence that does not fit or a row
// whose page is out of range is left unwritten.
__device__ __forceinline__ void write_new_keys(const AttnParams& p, const DecodeBlock& blk) {
  const KeyCache& c = p.seqs.cache;
  const NewKeys& add = p.new_keys;
  const int chunks = p.sizes.head_dim / 8, cached = blk.seq.seqlen_k - add.rows;
  for (int e = int(threadIdx.x); e < add.rows * chunks; e += kThreads) {
    const int r = e / chunks, column = 8 * (e % chunks), key = cached + r;
    if (c.paged() &&
        !c.page_in_range(c.block_table[int64_t(blk.b) * c.pages_per_sequence + key / c.page_size]))
      continue;
    const auto* k_src = static_cast<const uint16_t*>(add.k.data) + row_offset(add.k, blk.b, r) +
                        blk.hk * add.k.head_stride + column;
    const auto* v_src = static_cast<const uint16_t*>(add.v.data) + row_offset(add.v, blk.b, r) +
                        blk.hk * add.v.head_stride + column;
    auto* k_dst = static_cast<uint16_t*>(p.k.data) + key_offset(p, p.k, blk.b, blk.seq, key) +
                  blk.hk * p.k.head_stride + column;
    auto* v_dst = static_cast<uint16_t*>(p.v.data) + key_offset(p, p.v, blk.b, blk.seq, key) +
                  blk.hk * p.v.head_stride + column;
    *reinterpret_cast<uint4*>(k_dst) = *reinterpret_cast<const uint4*>(k_src);
    *reinterpret_cast<uint4*>(v_dst) = *reinterpret_cast<const uint4*>(v_src);
  }
}

// Where packed row r of the block writes its output (head_dim elements) and
// its lse (null where the call asks for none).
template <typename T>
struct OutputRow {
  T* out;
  float* lse;
};
template <typename T>
__device__ __forceinline__ OutputRow<T> output_row(const AttnParams& p, const DecodeBlock& blk,
                                                   const FastDivisor& group, int r) {
  int j;
  const int i = group.divmod(blk.row0 + r, j), hq = blk.hk * int(group.divisor) + j;
  return {static_cast<T*>(p.o.data) + row_offset(p.o, blk.b, i) + hq * p.o.head_stride,
          p.softmax.lse ? p.softmax.lse + stats_row0(p, blk.b, hq, blk.seq) + i : nullptr};
}

template <typename T, typename Shape, class Variant>
__global__ void __launch_bounds__(kThreads, Shape::kMinBlocks)
    decode_kernel(const AttnParams p, const KeySplit split, const DecodeGrid grid, bool vec16,
                  bool append) {
  constexpr int kD = Shape::kD, kOT = kD / 8;
  using QTile = typename Shape::QTile;
  using KVTile = typename Shape::KVTile;
  using Warp = typename Shape::Warp;
  extern __shared__ __align__(128) char smem[];
  char* const q_tile = smem;
  char* const stages = smem + QTile::kBytes;
  const Sizes& s = p.sizes;
  const int group = int(grid.group.divisor);

  // The merge kernel (combine.cu) may be scheduled from here on: it waits for
  // this grid's end itself.
  launch_dependent_grids();
  __shared__ DecodeBlock blk;
  if (threadIdx.x == 0) blk = decode_block(p, grid);
  __syncthreads();
  const bool valid = blk.valid && pages_in_range(p, blk);
  const int n_count = valid ? blk.n_end - blk.n_first : 0;

  // Q: packed row r is query row i = (row0 + r) / group of head hk·group + j.
  const auto q_row = [&](int r) {
    int j;
    const int i = grid.group.divmod(blk.row0 + r, j), hq = blk.hk * group + j;
    return static_cast<const uint16_t*>(p.q.data) + row_offset(p.q, blk.b, i) +
           hq * p.q.head_stride;
  };
  load_rows<QTile>(q_tile, blk.rows, s.head_dim, vec16, q_row);
  const KeyBlockLoader<KVTile> loader(p, blk, append);
  const auto load_stage = [&](int slot, int n) {
    char* k_tile = stages + slot * Shape::kStageBytes;
    if (vec16) {
      loader.load(p, blk, smem_address(k_tile), n);
      return;
    }
    const int key0 = n * kBlockN;
    const int keys = min(kBlockN, blk.seq.seqlen_k - key0);
    const auto* k = static_cast<const uint16_t*>(p.k.data) + blk.hk * p.k.head_stride;
    const auto* v = static_cast<const uint16_t*>(p.v.data) + blk.hk * p.v.head_stride;
    load_rows<KVTile>(k_tile, keys, s.head_dim, vec16,
                      [&](int r) { return k + key_offset(p, p.k, blk.b, blk.seq, key0 + r); });
    load_rows<KVTile>(k_tile + KVTile::kBytes, keys, s.head_dim, vec16,
                      [&](int r) { return v + key_offset(p, p.v, blk.b, blk.seq, key0 + r); });
  };
  cp_async_commit();  // Q's copies, a group of their own
#pragma unroll 1
  for (int st = 0; st < Shape::kStages - 1; ++st) {
    if (st < n_count) load_stage(st, blk.n_first + st);
    cp_async_commit();
  }
  if (append && blk.valid && blockIdx.x % grid.row_tiles.divisor == 0 && blockIdx.y == 0)
    write_new_keys(p, blk);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  // This thread's two rows (g and g + 8): their query row and score functor.
  int query[2];
  typename Variant::Score score[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int j;
    query[h] = grid.group.divmod(blk.row0 + g + 8 * h, j);
    score[h] = Variant::score(p.scores, p.softmax.scale, blk.b, blk.hk * group + j,
                              blk.mask.alignment);
  }

  // Q's A fragments: held in registers through the key loop where they fit
  // beside the accumulators (d ≤ 128), else read from shared memory per block.
  constexpr bool kQInRegisters = kD <= 128;
  uint32_t q_frag[kQInRegisters ? kD / 16 : 1][4];
  const auto q_lane = QTile::lane(smem_address(q_tile), lane % 16, lane / 16);
  if constexpr (kQInRegisters) {
    cp_async_wait<Shape::kStages - 1>();  // Q's group
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) ldmatrix_x4(q_frag[kk], QTile::address(q_lane, 0, kk));
  }

  float acc[1][kOT][4] = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}};
  sm80::RowSums<1> row_sum{};
  const float c = p.softmax.scale_log2;

  for (int it = 0; it < n_count; ++it) {
    cp_async_wait<Shape::kStages - 2>();
    __syncthreads();  // block it has landed; every warp is done with block it − 1's slot
    const int next = it + Shape::kStages - 1;
    if (next < n_count) load_stage(next % Shape::kStages, blk.n_first + next);
    cp_async_commit();

    const int n = blk.n_first + it;
    const uint32_t k_tile = smem_address(stages + (it % Shape::kStages) * Shape::kStageBytes);
    const uint32_t v_tile = k_tile + KVTile::kBytes;
    float sc[1][2][4] = {};
    {
      const auto k_lane = KVTile::lane(k_tile, 8 * (lane / 16) + lane % 8, (lane / 8) % 2);
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t b[4];
        ldmatrix_x4(b, KVTile::address(k_lane, kWarpKeys * warp, kk));
        if constexpr (kQInRegisters) {
          mma_two_tiles<T>(sc[0][0], sc[0][1], q_frag[kk], b);
        } else {
          uint32_t a[4];
          ldmatrix_x4(a, QTile::address(q_lane, 0, kk));
          mma_two_tiles<T>(sc[0][0], sc[0][1], a, b);
        }
      }
    }
    // The variant on every score; the mask where some row's range ends inside
    // the block (or the block runs past the keys).
    const bool cut = n < blk.unmasked_begin || n >= blk.unmasked_end;
    if ((!Variant::Score::kIdentity && p.scores.any()) || cut) {
      const int key0 = n * kBlockN + kWarpKeys * warp + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int begin = blk.mask.key_begin(query[h]), end = blk.mask.key_end(query[h]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + 8 * nt + e;
            float& x = sc[0][nt][2 * h + e];
            if constexpr (!Variant::Score::kIdentity) x = score[h](x, query[h], key);
            if (key >= end || key < begin) x = -INFINITY;
          }
      }
    }
    sm80::online_softmax<Warp>(c, 0.0f, sc, row_max, row_sum, acc);
    uint32_t pa[1][1][4];
    sm80::for_each_p_fragment<Warp>(sc, [&](int mt, int kk, int r, float x0, float x1) {
      pa[mt][kk][r] = pack_pair<T>(x0, x1);
    });
    const auto v_lane = KVTile::lane(v_tile, lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
#pragma unroll
    for (int dp = 0; dp < kOT / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, KVTile::address(v_lane, kWarpKeys * warp, dp));
      mma_two_tiles<T>(acc[0][2 * dp], acc[0][2 * dp + 1], pa[0][0], b);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they now hold the merge

  // Each warp's rows: max and sum per row, then kD accumulators per row.
  constexpr int kAccStride = Shape::kAccStride;
  float* const warp_max = reinterpret_cast<float*>(stages);
  float* const warp_sum = warp_max + kWarps * kRows;
  float* const warp_acc = warp_sum + kWarps * kRows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const float l = sm80::quad_sum(row_sum.l[0][h]);
    if (t == 0) {
      warp_max[warp * kRows + r] = row_max[0][h];
      warp_sum[warp * kRows + r] = l;
    }
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
      *reinterpret_cast<float2*>(&warp_acc[(warp * kRows + r) * kAccStride + 8 * ot + 2 * t]) =
          make_float2(acc[0][ot][2 * h], acc[0][ot][2 * h + 1]);
  }
  __syncthreads();

  // The warps' rows merged by their maxima: kRowThreads threads per row, each
  // four columns in every kRowThreads·4, so that a row's sums, its mask and
  // where it goes are worked out once per thread, not once per element.
  constexpr int kRowThreads = kThreads / kRows, kColumnSteps = kD / (4 * kRowThreads);
  float* const split_out = warp_acc + kWarps * kRows * kAccStride;  // split over a cluster
  float* const split_lse = split_out + kRows * kD;
  const int r = int(threadIdx.x) / kRowThreads, col0 = 4 * (int(threadIdx.x) % kRowThreads);
  if (r < blk.rows) {
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_max[w * kRows + r]);
    float weight[kWarps], l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = fast_exp2((warp_max[w * kRows + r] - exponent_max(m)) * c);
      l = fmaf(weight[w], warp_sum[w * kRows + r], l);
    }
    int j;
    const int i = grid.group.divmod(blk.row0 + r, j);
    const bool empty = !blk.mask.sees_keys_in(i, blk.key_lo, blk.key_hi);
    FinishedRow<float> row = finish_row(m * p.softmax.scale, l, empty);
    if (!valid) row = {false, NAN, NAN};
    // Where the row goes: the cluster's merge, the merge kernel's partials, or p.o.
    float* partial = nullptr;
    float* lse_to = nullptr;
    OutputRow<T> to{nullptr, nullptr};
    if (split.in_cluster) {
      partial = split_out + r * kD;
      lse_to = split_lse + r;
    } else if (split.count > 1) {
      const int hq = blk.hk * group + j;
      const int64_t rows_all = int64_t(s.batch) * s.heads_q * s.seqlen_q;
      const int64_t at = int64_t(blockIdx.y) * rows_all + stats_row0(p, blk.b, hq, blk.seq) + i;
      partial = split.out + at * s.head_dim;
      lse_to = split.lse + at;
    } else {
      to = output_row<T>(p, blk, grid.group, r);
      lse_to = to.lse;
    }
    // A loop, not unrolled: a block runs this once, so straight code would only
    // add instruction-cache misses (what the small steps wait on most).
#pragma unroll 1
    for (int step = 0; step < kColumnSteps; ++step) {
      const int col = col0 + 4 * kRowThreads * step;
      float o[4] = {};
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float* const from = &warp_acc[(w * kRows + r) * kAccStride + col];
        const float4 a = *reinterpret_cast<const float4*>(from);
        o[0] = fmaf(weight[w], a.x, o[0]);
        o[1] = fmaf(weight[w], a.y, o[1]);
        o[2] = fmaf(weight[w], a.z, o[2]);
        o[3] = fmaf(weight[w], a.w, o[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (col + e >= s.head_dim) continue;
        const float out = row.out(o[e]);
        if (partial) partial[col + e] = out;
        else to.out[col + e] = from_float<T>(out);
      }
    }
    if (col0 == 0 && lse_to) *lse_to = row.lse;
  }
  if (split.in_cluster)
    merge_in_cluster<kThreads>(blk.rows, s.head_dim, kD, split.count, split_out, split_lse,
                               [&](int r, int col, float out, float lse) {
                                 const OutputRow<T> to = output_row<T>(p, blk, grid.group, r);
                                 to.out[col] = from_float<T>(out);
                                 if (col == 0 && to.lse) *to.lse = lse;
                               });
}

}  // namespace flashattn::cuda::decode
