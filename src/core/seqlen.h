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
//   - a KV cache: q dense (batch, seqlen_q); sequence b's keys are the first
//     seqlens[b] + appended rows of k's and v's batch b (contiguous), or of the
//     pages block_table[b][·] names (paged: k and v are (pages, page_size, ...)).
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

// A KV cache's arrays (null seqlens: no cache). The kernels read sequence b's
// length as seqlens[b] + appended: the keys cached before the call and those
// the call appended (the API writes them into the cache first).
struct KeyCache {
  const int32_t* seqlens = nullptr;      // (batch,) keys cached before this call
  int appended = 0;                      // keys appended to every sequence by this call
  const int32_t* block_table = nullptr;  // paged: (batch, pages_per_sequence) page indices
  int pages_per_sequence = 0;
  int page_size = 0;                     // paged: keys per page
  int64_t pages = 0;                     // paged: k's and v's first extent
  int capacity = 0;                      // keys a sequence can hold
  bool checked = true;                   // seqlens and block_table were checked on the host
  int key_splits = 0;                    // the caller's split-KV count (0: automatic)
  FLASHATTN_HOST_DEVICE bool present() const { return seqlens != nullptr; }
  FLASHATTN_HOST_DEVICE bool paged() const { return block_table != nullptr; }
  // The device-side checks of an unchecked call: `cached` keys plus those
  // appended fit, and a page index names one of k's pages.
  FLASHATTN_HOST_DEVICE bool fits(int32_t cached) const {
    return cached >= 0 && int64_t(cached) + appended <= capacity;
  }
  FLASHATTN_HOST_DEVICE bool page_in_range(int64_t page) const { return page >= 0 && page < pages; }
};

// The packed layout's arrays (null: dense) and the tensors' own lengths.
struct SequenceLayout {
  const int32_t* cu_seqlens_q = nullptr;  // batch + 1 prefix sums, where the kernels read (host or device)
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0;  // packed: the tensors' seqlen (every sequence's rows), and keys
  int64_t total_k = 0;
  // packed: whether the prefix sums were checked on the host; unchecked ones are
  // checked on the device before any kernel reads them (cuda/common/packed_check.h),
  // and the kernels read the checked copy.
  bool checked = true;
  KeyCache cache;
  FLASHATTN_HOST_DEVICE bool packed() const { return cu_seqlens_q != nullptr; }
  // Whether sequences differ in length (packed, or a cache): the mask is then
  // resolved per sequence.
  FLASHATTN_HOST_DEVICE bool ragged() const { return packed() || cache.present(); }
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
