// Per-sequence lengths: how many query rows and keys sequence b has. Backends
// ask sequence_lengths(p, b) and row_mask(p, b) (core/params.h), per tile, so
// that a variable-length batch (cu_seqlens) or a KV cache (per-sequence cache
// lengths) is a new case of those two functions, not an edit of every kernel.
// Dense batches, the only layout today: every sequence has sizes.seqlen_q query
// rows and sizes.seqlen_k keys, sequence b at b·batch_stride.
#pragma once

namespace flashattn {

struct SequenceLengths {
  int seqlen_q;
  int seqlen_k;
};

}  // namespace flashattn
