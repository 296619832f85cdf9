// The last wave's tiles split. A grid of equal tiles, one block an SM, fills
// whole waves and leaves a last one partly empty (tiles % SMs of them): there
// the other SMs idle while those tiles run. Split, each of those tiles runs as
// `parts` blocks, part j walking the j-th share of the tile's units of work
// (the forward's key blocks, the backward's steps over query tiles), and the
// part that finishes last merges the others' partial results and writes the
// tile: the forward's by the online softmax's rescale (cuda/sm90/tail_merge.cuh),
// the backward's dK and dV by adding them (cuda/sm90/backward_kernel.cuh).
// Equal tiles only: a causal grid's last wave holds its lightest tiles
// (heaviest first), so it is not split.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

// Block `block` of a split grid: the unsplit grid's block it stands for, its
// place among the split tiles (−1: a whole tile) and which part it is.
struct TailBlock {
  int block, tail, part;
};

struct TailSplit {
  int first = 0;  // tiles before it run whole; from it on, `parts` blocks each
  int parts = 1;  // 1: no split
  // The grid's blocks for `tiles` tiles.
  int64_t blocks(int64_t tiles) const { return first + (tiles - first) * parts; }
  FLASHATTN_HOST_DEVICE TailBlock at(int block) const {
    if (parts == 1 || block < first) return {block, -1, 0};
    const int tail = (block - first) / parts;
    return {first + tail, tail, block - first - tail * parts};
  }
  // Where part `part`'s share of a tile's `units` units begins (part `parts`:
  // the end); the shares differ by at most one unit.
  FLASHATTN_HOST_DEVICE int share_begin(int units, int part) const {
    return int(int64_t(units) * part / parts);
  }
};

inline constexpr int kMaxTailParts = 16;

// A kernel's costs of a split, in its units of work: a block's own fixed cost
// (its loads before the first unit, its epilogue), a part's added cost (its
// partial result out, the last part's read-back of the others), the fewest
// units a part walks, and the fewest a tile must have to be split at all.
struct TailCosts {
  double block;
  double part;
  int min_part_units;
  int min_tile_units;
};

// The forward's, in key blocks: Q in, the first K and V waited for and the
// epilogue about 1.5 blocks; a part's partials out and back about 1 more.
inline constexpr TailCosts kForwardTailCosts{1.5, 1.0, 4, 8};

// The split of `tiles` tiles of `units` units each, one block an SM on `sms`:
// the part count whose rounds over the last wave's tiles take least time;
// none unless it saves a twentieth of the last wave's time.
inline TailSplit tail_split(int64_t tiles, int sms, int units, const TailCosts& costs) {
  const int64_t last = sms > 0 ? tiles % sms : 0;
  if (last == 0 || units < costs.min_tile_units) return {};
  double best_time = 0.95 * (units + costs.block);
  TailSplit best;
  for (int parts = 2; parts <= kMaxTailParts && parts * costs.min_part_units <= units; ++parts) {
    const int64_t rounds = (last * parts + sms - 1) / sms;
    const double time = double(rounds) * ((units + parts - 1) / parts + costs.block + costs.part);
    if (time < best_time) {
      best_time = time;
      best = TailSplit{int(tiles - last), parts};
    }
  }
  return best;
}

}  // namespace flashattn
