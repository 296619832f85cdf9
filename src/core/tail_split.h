// The last wave's tiles split by keys. A grid of equal tiles, one block an SM,
// fills whole waves and leaves a last one partly empty (tiles % SMs of them):
// there the other SMs idle while those tiles run. Split, each of those tiles
// runs as `parts` blocks, part j walking the j-th share of the tile's key
// blocks, and the part that finishes last merges the others' partial results
// (the online softmax's rescale, across parts) and writes the tile. Equal tiles
// only: a causal grid's last wave holds its lightest tiles (heaviest first), so
// it is not split.
#pragma once

#include <cstdint>

namespace flashattn {

struct TailSplit {
  int first = 0;  // tiles before it run whole; from it on, `parts` blocks each
  int parts = 1;  // 1: no split
  // The grid's blocks for `tiles` tiles.
  int64_t blocks(int64_t tiles) const { return first + (tiles - first) * parts; }
};

inline constexpr int kMaxTailParts = 16;
inline constexpr int kMinPartKeyBlocks = 4;  // a part walks at least this many key blocks

// The split of `tiles` tiles of `key_blocks` key blocks each, one block an SM
// on `sms`: the part count whose rounds over the last wave's tiles take least
// time, costed in key blocks (a block's own fixed cost, its Q in, the first
// K and V waited for and its epilogue, about 1.5 blocks; a part's partial
// result out and the last part's read-back of the others, about 1 more); none
// unless it saves a twentieth of the last wave's time.
inline TailSplit tail_split(int64_t tiles, int sms, int key_blocks) {
  const int64_t last = sms > 0 ? tiles % sms : 0;
  if (last == 0) return {};
  constexpr double kBlockCost = 1.5, kPartCost = 1.0;
  double best_time = 0.95 * (key_blocks + kBlockCost);
  TailSplit best;
  for (int parts = 2; parts <= kMaxTailParts && parts * kMinPartKeyBlocks <= key_blocks; ++parts) {
    const int64_t rounds = (last * parts + sms - 1) / sms;
    const double time =
        double(rounds) * ((key_blocks + parts - 1) / parts + kBlockCost + kPartCost);
    if (time < best_time) {
      best_time = time;
      best = TailSplit{int(tiles - last), parts};
    }
  }
  return best;
}

}  // namespace flashattn
