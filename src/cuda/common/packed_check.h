// A packed batch's prefix sums checked on the device (SequenceLayout::checked
// false), so that the call waits for nothing and can be captured in a CUDA
// graph. One small kernel checks the rules validate.cpp checks on the host
// (0 first, nondecreasing, the totals last, no sequence longer than the given
// maximum the grids are sized by) and writes a copy that the backend's kernels
// read instead of the caller's: the prefix sums themselves where they keep the
// rules, else every entry 0 (every sequence empty), so that no kernel reads or
// writes outside the tensors. After the kernels, poison() turns the outputs to
// NaN where the rules were broken: the caller gets no error (nothing waits to
// report one), but no output that looks like an answer either.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/params.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {

// An output to poison: a (batch, rows, heads, width) tensor of the call's dtype.
struct PoisonTarget {
  TensorRef t;
  int64_t rows;
  int heads;
  int width;
};

class DeviceCheckedSequences {
 public:
  // Queues the check of p's prefix sums on p's stream (p packed, unchecked).
  explicit DeviceCheckedSequences(const AttnParams& p);
  // The prefix sums p's kernels read: the checked copy.
  const int32_t* cu_seqlens_q() const;
  const int32_t* cu_seqlens_k() const;
  // p (AttnParams or BwdParams) reading the checked copy.
  template <typename P>
  P applied_to(const P& p) const {
    P checked = p;
    checked.seqs.cu_seqlens_q = cu_seqlens_q();
    checked.seqs.cu_seqlens_k = cu_seqlens_k();
    checked.seqs.checked = true;
    return checked;
  }
  // Queued after the kernels that write them: where the prefix sums broke a
  // rule, every element of the targets and of stats (n floats, lse or
  // nothing) is NaN; else the kernel returns at once.
  void poison(std::initializer_list<PoisonTarget> targets, float* stats, int64_t stats_n) const;

 private:
  int batch_;
  DType dtype_;
  void* stream_;
  Scratch copy_;  // cu_seqlens_q's copy, cu_seqlens_k's copy (batch + 1 each), the verdict
};

// run(p) for p as the kernels must read it (P: AttnParams or BwdParams): where
// p's prefix sums are unchecked, run reads the device-checked copy, and the
// outputs (and stats, n floats) are poisoned after it if the sums broke a rule.
template <typename P, typename Run>
void on_checked_sequences(const P& p, Run&& run, std::initializer_list<PoisonTarget> outputs,
                          float* stats, int64_t stats_n) {
  if (!p.seqs.packed() || p.seqs.checked) {
    run(p);
    return;
  }
  const DeviceCheckedSequences sequences(p);
  run(sequences.applied_to(p));
  sequences.poison(outputs, stats, stats_n);
}

}  // namespace flashattn::cuda
