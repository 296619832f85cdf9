// Where each sequence of a batch lies in the tensors, and its lengths. Two
// layouts:
//   - dense: sequence b is batch index b of q, k, v (and out, dout, dq, dk, dv),
//     every sequence with Sizes::seqlen_q rows and Sizes::seqlen_k keys;
//   - packed (a variable-length batch): the tensors hold one batch index, the
//     sequences one after another along seqlen, and sequence b's rows are
//     [cu_seqlens_q[b], cu_seqlens_q[b + 1]), its keys likewise in
//     cu_seqlens_k. Sizes then holds the number of sequences and the longest
//     lengths (grids are sized by them), and the tensors' batch strides are 0,
//     so that b · batch_stride + row0 · row_stride addresses either layout.
// Each sequence is its own attention problem: its own mask alignment, its own
// rows without keys (row_mask(p, seq) in core/params.h resolves the rule for it).
// lse and the backward's D are (batch, heads_q, seqlen_q) dense and
// (heads_q, total_q) packed, as FlashAttention lays them out: stats_row0 gives
// a sequence's first row in either.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

struct SequenceLengths {
  int seqlen_q;
  int seqlen_k;
};

// The packed layout's arrays (null: dense) and the tensors' own lengths.
struct SequenceLayout {
  const int32_t* cu_seqlens_q = nullptr;  // batch + 1 prefix sums, where the kernels read (host or device)
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0;  // packed: the tensors' seqlen (every sequence's rows), and keys
  int64_t total_k = 0;
  FLASHATTN_HOST_DEVICE bool packed() const { return cu_seqlens_q != nullptr; }
};

// Sequence b: its first query row and first key along the tensors' seqlen
// axis (0 dense), and its lengths.
struct Sequence {
  int64_t q_row0;
  int64_t k_row0;
  int seqlen_q;
  int seqlen_k;
  FLASHATTN_HOST_DEVICE SequenceLengths lengths() const { return {seqlen_q, seqlen_k}; }
};

}  // namespace flashattn
