// Per-sequence lengths: how many query rows and keys one sequence has; resolve()
// (core/mask.h) turns the caller's mask rule into each row's key range for them.
// Dense batches are the only layout today: every sequence has sizes.seqlen_q rows
// and sizes.seqlen_k keys, and the kernels read those sizes directly and the mask
// through row_mask(p, b) (core/params.h; the Hopper kernel from its own
// parameters). A variable-length batch or a KV cache gives each sequence its own
// lengths: an accessor beside row_mask, through which those reads then go.
#pragma once

namespace flashattn {

struct SequenceLengths {
  int seqlen_q;
  int seqlen_k;
};

}  // namespace flashattn
