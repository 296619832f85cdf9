// A kRows × kCols tile of 16-bit elements in shared memory, laid out so that
// ldmatrix (8 rows × 16 bytes per matrix) and cp.async hit every bank once.
//
// Columns are cut into 64-wide panels stored one after another; inside a panel
// a row is 128 bytes, i.e. eight 16-byte chunks, and chunk c of row r sits at
// position c ^ (r % 8). Eight consecutive rows of one logical chunk therefore
// land in eight different 16-byte bank groups. When kCols % 64 == 32 the last
// panel is 64 bytes wide (four chunks); there two rows share a 128-byte line, so
// chunk c of row r sits at c ^ ((r / 2) % 4), which again spreads eight
// consecutive rows over all eight bank groups.
//
// The tile is filled from global memory by cp.async (16 bytes per copy, zeros
// past the valid rows and columns) or, for views whose rows are not 16-byte
// aligned, by plain loads of single elements.
#pragma once

#include <cstdint>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/opaque.cuh"

namespace flashattn::cuda {

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int kRows, int kCols>
struct SmemTile {
  static_assert(kCols % 32 == 0, "tiles are whole 32-column half panels");
  static constexpr int kRowCount = kRows;
  static constexpr int kChunks = kCols / 8;  // 16-byte chunks per row
  static constexpr int kFullPanels = kCols / 64;
  static constexpr int kBytes = kRows * kCols * 2;

  // Byte offset of chunk `chunk` (columns 8·chunk .. 8·chunk + 7) of row r.
  __device__ __forceinline__ static uint32_t offset(int r, int chunk) {
    const int panel = chunk / 8, c = chunk % 8;
    if (kCols % 64 == 0 || panel < kFullPanels)
      return uint32_t(panel * kRows * 128 + r * 128 + ((c ^ (r % 8)) << 4));
    return uint32_t(kFullPanels * kRows * 128 + r * 64 + ((c ^ ((r / 2) % 4)) << 4));
  }

  // ldmatrix walks chunks 2·j + h of rows r + dr, where the lane fixes r and
  // h (0 or 1) and the unrolled loop fixes j and dr (a multiple of 8, which
  // leaves the swizzle unchanged). As 2·j and h share no bits, the swizzle
  // splits into a per-lane xor mask and a per-j constant: an address costs an
  // xor and an add, and a Lane holds two registers per panel width.
  struct Lane {
    uint32_t row, xmask;            // 64-column panels
    uint32_t half_row, half_xmask;  // the trailing 32-column panel, if any
  };
  __device__ __forceinline__ static Lane lane(uint32_t base, int r, int h) {
    return {base + uint32_t(r * 128), uint32_t((h ^ (r % 8)) << 4),
            base + uint32_t(kFullPanels * kRows * 128 + r * 64), uint32_t((h ^ ((r / 2) % 4)) << 4)};
  }
  // As lane(), for a lane whose columns start at c0 instead of 0: address(ln,
  // dr, j) is then chunk c0 / 8 + 2·j + h. c0 is a multiple of the 16·J columns
  // the lane walks (j < J, a power of two), and those stay inside one 64-column
  // panel (or the trailing 32-column one), unless c0 is a multiple of 64: then
  // the chunk offset inside the panel has no bit in common with 2·j + h, and
  // folds into the xor masks.
  __device__ __forceinline__ static Lane lane_at(uint32_t base, int r, int h, int c0) {
    Lane ln = lane(base, r, h);
    const uint32_t inner = uint32_t((c0 % 64) / 8) << 4;
    if (kCols % 64 == 0) {
      ln.row += uint32_t(c0 / 64 * kRows * 128);
      ln.xmask ^= inner;
    } else {
      ln.half_xmask ^= inner;
    }
    return ln;
  }
  // Shared address of chunk 2·j + h of row r + dr.
  __device__ __forceinline__ static uint32_t address(const Lane& ln, int dr, int j) {
    const int panel = (2 * j) / 8;
    if (kCols % 64 == 0 || panel < kFullPanels)
      return ln.row + uint32_t(panel * kRows * 128 + dr * 128) +
             ((uint32_t((2 * j) % 8) << 4) ^ ln.xmask);
    return ln.half_row + uint32_t(dr * 64) + ((uint32_t((2 * j) % 4) << 4) ^ ln.half_xmask);
  }
};

// Calls copy(dst, src, n) for the 16-byte chunks of kPanels panels of the tile,
// from panel kFirst on, each kWidth chunks wide (8, or 4 for a trailing 32-column
// panel), that this thread fills: dst its place in shared memory, src its first
// element in global memory and n how many of its 8 elements exist (0 for chunks
// past rows or cols). The thread copies chunk column tid % kWidth of every panel,
// in rows tid / kWidth + i·kThreads / kWidth (a multiple of 8 apart, so that the
// swizzle repeats): one source pointer per row, the panels at constant offsets
// from it, and shared offsets that differ by constants.
template <typename Tile, int kThreads, int kFirst, int kPanels, int kWidth, typename Copy>
__device__ __forceinline__ void for_each_panel_chunk(char* base, const uint16_t* src,
                                                     int64_t row_stride, int rows, int cols,
                                                     int tid, Copy&& copy) {
  constexpr int kRowStep = kThreads / kWidth;
  static_assert(kRowStep % 8 == 0 && Tile::kRowCount % kRowStep == 0);
  const int c = tid % kWidth, r0 = tid / kWidth;
  const uint16_t* from = src + r0 * row_stride + 8 * (8 * kFirst + c);
  opaque(from);
  char* to = base + Tile::offset(r0, 8 * kFirst + c);
#pragma unroll
  for (int i = 0; i < Tile::kRowCount / kRowStep; ++i) {
    const uint16_t* row = from + i * kRowStep * row_stride;
    const bool row_exists = r0 + i * kRowStep < rows;
#pragma unroll
    for (int panel = 0; panel < kPanels; ++panel) {
      const int c0 = 8 * (8 * (kFirst + panel) + c);
      copy(to + panel * Tile::kRowCount * 128 + i * kThreads * 16, row + 64 * panel,
           row_exists ? min(max(cols - c0, 0), 8) : 0);
    }
  }
}

// Calls copy(dst, src, n) as above for each chunk of the tile this thread fills:
// the 64-column panels, then the trailing 32-column one if any.
template <typename Tile, int kThreads, typename Copy>
__device__ __forceinline__ void for_each_chunk(char* base, const uint16_t* src, int64_t row_stride,
                                               int rows, int cols, Copy&& copy) {
  opaque(src), opaque(row_stride);
  const int tid = thread_index();
  if constexpr (Tile::kFullPanels > 0)
    for_each_panel_chunk<Tile, kThreads, 0, Tile::kFullPanels, 8>(base, src, row_stride, rows,
                                                                  cols, tid, copy);
  if constexpr (Tile::kChunks % 8 != 0)
    for_each_panel_chunk<Tile, kThreads, Tile::kFullPanels, 1, 4>(base, src, row_stride, rows,
                                                                  cols, tid, copy);
}

// Calls visit(offset, r, chunk) for each 16-byte chunk of columns [0, 8·kChunks)
// of rows [row0, row0 + kWarpRows) of the tile, spread over a warp's 32 lanes:
// offset is the chunk's byte offset in the tile, r its row. Panel by panel a lane
// keeps one chunk column and steps through rows 32 / width apart. Eight rows on,
// a row's swizzle repeats, so the rows a lane visits alternate between two base
// offsets (one when the step is 8) plus constants: no swizzle arithmetic per chunk.
template <typename Tile, int kWarpRows, int kChunks, typename Visit>
__device__ __forceinline__ void for_each_warp_chunk(int lane, int row0, Visit&& visit) {
  static_assert(kChunks % 8 == 0 || kChunks == Tile::kChunks,
                "whole 64-column panels, or all of the tile");
  constexpr int kPanels = (kChunks + 7) / 8;
#pragma unroll
  for (int panel = 0; panel < kPanels; ++panel) {
    const int width = panel < Tile::kFullPanels ? 8 : 4;  // chunks per row in this panel
    const int row_step = 32 / width, row_bytes = 16 * width;
    const int chunk = panel * 8 + lane % width;
    const int r = row0 + lane / width;
    const uint32_t even = Tile::offset(r, chunk);
    const uint32_t odd = Tile::offset(r + row_step, chunk) - uint32_t(row_step * row_bytes);
#pragma unroll
    for (int i = 0; i < kWarpRows * width / 32; ++i)
      visit((i % 2 ? odd : even) + uint32_t(i * row_step * row_bytes), r + i * row_step, chunk);
  }
}

// Stores rows [0, rows) and columns [0, cols) of the tile to dst[r·row_stride + c],
// a block of kThreads threads together, after a barrier that follows the tile's
// last write: 16-byte stores where vec16 (dst and row_stride 16-byte aligned)
// and a chunk lies wholly inside cols, else element by element.
template <typename Tile, int kThreads>
__device__ __forceinline__ void store_tile(const char* base, uint16_t* dst, int64_t row_stride,
                                           int rows, int cols, bool vec16) {
  for (int e = thread_index(); e < Tile::kRowCount * Tile::kChunks; e += kThreads) {
    const int r = e / Tile::kChunks, c0 = 8 * (e % Tile::kChunks);
    if (r >= rows || c0 >= cols) continue;
    const uint4 chunk = *reinterpret_cast<const uint4*>(base + Tile::offset(r, e % Tile::kChunks));
    uint16_t* to = dst + r * row_stride + c0;
    if (vec16 && c0 + 8 <= cols) {
      *reinterpret_cast<uint4*>(to) = chunk;
    } else {
      const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (c0 + j < cols) to[j] = uint16_t(words[j / 2] >> (16 * (j % 2)));
    }
  }
}

// Which copy load_tile issues. kChecked: without per-chunk bounds where the whole
// tile exists (decided at run time, per tile), with them elsewhere. kWhole: the
// caller knows the whole tile exists and rows are 16-byte aligned. kBounded: with
// per-chunk bounds always.
enum class TileExtent { kChecked, kWhole, kBounded };

// Starts filling the tile at `base` with src[r·row_stride + c] for r < rows,
// c < cols and zeros elsewhere. vec16: src and row_stride are 16-byte aligned,
// so whole chunks go by cp.async (landed after cp_async_wait and a barrier);
// otherwise elements are copied one by one, finished on return.
template <typename Tile, int kThreads, TileExtent kExtent = TileExtent::kChecked, typename T>
__device__ __forceinline__ void load_tile(char* base, const T* src, int64_t row_stride, int rows,
                                          int cols, bool vec16) {
  const auto* elems = reinterpret_cast<const uint16_t*>(src);
  if (kExtent == TileExtent::kWhole ||
      (kExtent == TileExtent::kChecked && vec16 && rows >= Tile::kRowCount &&
       cols >= 8 * Tile::kChunks)) {
    // The whole tile exists: no per-chunk bounds. Computed for every chunk of
    // every K and V tile they were 15% of cuda_mma's instructions (ncu, d 128,
    // 512 keys: 85 M warp instructions before, 72 M after).
    for_each_chunk<Tile, kThreads>(base, elems, row_stride, rows, cols,
                                   [](char* dst, const uint16_t* from, int) {
                                     cp_async_16(dst, from, true);
                                   });
  } else if (vec16) {
    for_each_chunk<Tile, kThreads>(base, elems, row_stride, rows, cols,
                                   [&](char* dst, const uint16_t* from, int n) {
                                     cp_async_16_partial(dst, n > 0 ? from : elems, 2 * n);
                                   });
  } else {
    for_each_chunk<Tile, kThreads>(base, elems, row_stride, rows, cols,
                                   [](char* dst, const uint16_t* from, int n) {
                                     uint32_t words[4];
#pragma unroll
                                     for (int j = 0; j < 4; ++j) {
                                       const uint32_t lo = 2 * j < n ? from[2 * j] : 0u;
                                       const uint32_t hi = 2 * j + 1 < n ? from[2 * j + 1] : 0u;
                                       words[j] = lo | hi << 16;
                                     }
                                     *reinterpret_cast<uint4*>(dst) =
                                         make_uint4(words[0], words[1], words[2], words[3]);
                                   });
  }
}

// 16 bytes at a shared-memory address (a held 32-bit address, where a generic
// pointer would be converted on every load).
__device__ __forceinline__ uint4 lds128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

}  // namespace flashattn::cuda
