// The mask as a key range per query row: row i of a sequence sees the keys
// [key_begin(i), key_end(i)) and no other. MaskRule is what the caller asked
// for; RowMask is that rule resolved for one sequence's lengths (row_mask(p, b)
// in core/params.h), and everything a backend needs follows from it:
//   - the element mask of a score tile (key j hidden from row i: score −inf);
//   - the key blocks a query tile visits (blocks outside every row's range are
//     skipped, never loaded) and, among them, those every row of the tile sees
//     whole, which need no element mask;
//   - the query rows that see a key tile (the backward walks those);
//   - whether a row is empty: it sees no key, so its output is 0 and its lse −inf.
// Causal: key j is visible to row i iff j <= i + offset, offset 0 (top-left) or
// seqlen_k − seqlen_q (bottom-right). key_begin is 0 for every rule today (see
// KeyBlocks::kLowerEnds); a sliding window will give it a lower end.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/host_device.h"
#include "core/seqlen.h"

namespace flashattn {

// The mask the caller asked for; resolve() turns it, for one sequence's
// lengths, into the key range each query row sees.
struct MaskRule {
  bool causal;
  bool bottom_right;  // causal alignment: key j visible to row i iff j <= i + seqlen_k - seqlen_q
};

// Key blocks [begin, end) hold a key that some row of a query tile sees; in
// [unmasked_begin, unmasked_end) every row of the tile sees every key. Plain
// data, as RowMask.
struct KeyBlocks {
  // Whether a mask rule can give a row a lower end (key_begin > 0). None can
  // yet; a sliding window will. While none can, a kernel walks down to block 0
  // and checks only the upper end, both known at compile time: a lower end known
  // only at run time costs the mma.sync key loops a register, which at head dims
  // 64 and 128 (255 registers) sent K's and V's row strides out to constant
  // loads inside the loop, 3–5% slower (docs/perf/cuda_mma.md, v3.8).
  static constexpr bool kLowerEnds = false;

  int begin, end;
  int unmasked_begin, unmasked_end;

  // The first block a walk visits.
  FLASHATTN_HOST_DEVICE int first() const { return kLowerEnds ? begin : 0; }
  // Whether a row's key range may begin inside block n_block.
  FLASHATTN_HOST_DEVICE bool lower_end_in(int n_block) const {
    return kLowerEnds && n_block < unmasked_begin;
  }
  // Whether block n_block needs the element mask. Both bounds are read
  // unconditionally (| not ||), so that a kernel can load them early.
  FLASHATTN_HOST_DEVICE bool needs_mask(int n_block) const {
    return lower_end_in(n_block) | (n_block >= unmasked_end);
  }
};

// Query rows [begin, end) see some key of a key tile.
struct RowRange {
  int begin, end;
};

// Plain data without default initialisers, so kernels can keep it in a
// __shared__ variable; resolve() sets every field.
struct RowMask {
  int seqlen_q;
  int seqlen_k;
  bool causal;
  // Rows below it see no key, rows from it on see some (key_end grows with the
  // row, key_begin is 0): INT_MIN where every row sees a key, INT_MAX where none
  // does. Resolved once, so that a kernel's empty-row test is one comparison
  // with a constant, not key_end's 64-bit arithmetic and branches per row
  // (cuda_wgmma's epilogue, docs/perf/cuda_wgmma.md v4.17).
  int first_nonempty_row;
  int64_t causal_offset;  // key j visible to row i iff !causal or j <= i + causal_offset

  FLASHATTN_HOST_DEVICE int key_begin(int64_t /*row*/) const { return 0; }
  FLASHATTN_HOST_DEVICE int key_end(int64_t row) const {
    if (!causal) return seqlen_k;
    const int64_t end = row + causal_offset + 1;
    return end <= 0 ? 0 : (end >= seqlen_k ? seqlen_k : int(end));
  }
  // key_end for a problem whose rows and keys number at most 2^30 each (so the
  // sum below fits 32 bits), as selects: the same value, without 64-bit
  // arithmetic or branches before a latency-bound kernel's loads (cuda_tiled's
  // one-warp path; test_core checks it against key_end).
  FLASHATTN_HOST_DEVICE int key_end_small(int row) const {
    const int end = row + int(causal_offset) + 1;
#ifdef __CUDA_ARCH__
    return causal ? ::max(0, ::min(seqlen_k, end)) : seqlen_k;  // IMNMX, no branch
#else
    return causal ? std::max(0, std::min(seqlen_k, end)) : seqlen_k;
#endif
  }
  // key_end(row) <= key_begin(row), from the resolved first_nonempty_row.
  FLASHATTN_HOST_DEVICE bool empty(int64_t row) const { return row < first_nonempty_row; }
  // key >= key_end(row), asked without clamping key_end: the cheaper form for a
  // key loop that asks it of every block's last key.
  FLASHATTN_HOST_DEVICE bool beyond_end(int64_t row, int64_t key) const {
    return key >= seqlen_k || (causal && key > row + causal_offset);
  }
  // Whether the row sees a key of [key_lo, key_hi): a kernel that walked only
  // those keys (one split of them) finishes the row as empty if not.
  FLASHATTN_HOST_DEVICE bool sees_keys_in(int64_t row, int key_lo, int key_hi) const {
    const int lo = key_begin(row) > key_lo ? key_begin(row) : key_lo;
    const int hi = key_end(row) < key_hi ? key_end(row) : key_hi;
    return lo < hi;
  }

  // The key blocks of block_n keys for query rows [row0, row0 + rows) (row0 may
  // be negative: a tile that starts before row 0). key_begin and key_end grow
  // with the row, so the first row bounds the blocks all rows see whole and the
  // last row the blocks any row sees.
  FLASHATTN_HOST_DEVICE KeyBlocks key_blocks(int64_t row0, int rows, int block_n) const {
    const int64_t last = row0 + rows - 1;
    KeyBlocks b{};
    b.begin = key_begin(row0) / block_n;
    b.end = (key_end(last) + block_n - 1) / block_n;
    if (b.end < b.begin) b.end = b.begin;
    b.unmasked_begin = (key_begin(last) + block_n - 1) / block_n;
    b.unmasked_end = key_end(row0) / block_n;
    if (b.unmasked_end < b.unmasked_begin) b.unmasked_end = b.unmasked_begin;
    return b;
  }

  // The query rows that see some key of [key0, key0 + keys): under a causal
  // mask, rows from the first whose range reaches key0 to the last row.
  FLASHATTN_HOST_DEVICE RowRange rows_seeing(int key0, int keys) const {
    if (keys <= 0 || key0 >= seqlen_k) return {0, 0};
    int64_t first = causal ? int64_t(key0) - causal_offset : 0;
    if (first < 0) first = 0;
    return first >= seqlen_q ? RowRange{0, 0} : RowRange{int(first), seqlen_q};
  }
};

FLASHATTN_HOST_DEVICE RowMask resolve(const MaskRule& rule, SequenceLengths seq) {
  RowMask m{};
  m.seqlen_q = seq.seqlen_q;
  m.seqlen_k = seq.seqlen_k;
  m.causal = rule.causal;
  m.causal_offset = rule.bottom_right ? int64_t(seq.seqlen_k) - seq.seqlen_q : 0;
  // Causal, row i sees a key iff i + causal_offset >= 0; -causal_offset lies
  // within int's range, both lengths being ints.
  m.first_nonempty_row = seq.seqlen_k == 0 ? INT_MAX : rule.causal ? int(-m.causal_offset) : INT_MIN;
  return m;
}

}  // namespace flashattn
