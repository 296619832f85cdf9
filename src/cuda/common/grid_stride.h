// The grid of an element-wise kernel whose threads walk its range grid-stride
// (each steps by the grid's whole width), so that the grid may be capped.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashattn::cuda {

// Blocks for n items at per_block items a block, at most 2^20: past that the
// threads' own loops take the rest, and a grid stays within what a launch takes.
inline unsigned grid_stride_blocks(int64_t n, int per_block) {
  constexpr int64_t kMaxBlocks = int64_t(1) << 20;
  return unsigned(std::min<int64_t>((n + per_block - 1) / per_block, kMaxBlocks));
}

}  // namespace flashattn::cuda
