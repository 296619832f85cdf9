// Per-sequence lengths: where the rows of sequence b lie and how many there are.
// Every backend asks here, per tile, rather than reading sizes.seqlen_q/_k
// itself, so that a variable-length batch (cu_seqlens) or a KV cache (per-
// sequence cache lengths) is a new case of this one function, not an edit of
// every kernel. Dense batches, the only layout today: every sequence has
// sizes.seqlen_q query rows and sizes.seqlen_k keys, sequence b at b·batch_stride.
#pragma once

#include "core/params.h"

namespace flashattn {

struct SequenceLengths {
  int seqlen_q = 0;
  int seqlen_k = 0;
};

FLASHATTN_HOST_DEVICE SequenceLengths sequence_lengths(const AttnParams& p, int /*batch*/) {
  return {p.sizes.seqlen_q, p.sizes.seqlen_k};
}

}  // namespace flashattn
