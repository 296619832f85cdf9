// The fp32 dQ sums of the tensor-core backwards: their zeroed scratch memory
// (with the deterministic mode's turn counters), and the conversion that ends
// every such backward, the sums scaled and rounded into dq.
#pragma once

#include <cstddef>

#include "core/params.h"
#include "cuda/common/dq_accum.cuh"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {

// One call's sums, zeroed on p's stream by the D pass (row_dot.h: the
// constructor runs it, so a backend that takes DqSums computes D there), in
// dq_accum.cuh's layout (layout()):
// dense, per (batch, q head), rows_padded() = query_tiles · block_m rows of
// cols floats; in deterministic mode also a turn counter per (sequence, q head,
// query tile), else turns() is null. turn_group(): in deterministic mode, how
// many (sequence, kv head) slices the grid runs side by side (their key tiles
// interleaved, common/backward_walk.cuh), as many as keep their sums, Q and dO
// within half of L2 and at least one; 0 in the default mode. extra(): another
// extra_bytes of zeroed scratch for the kernel's own sums (a split tail's dK
// and dV, common/backward_walk.cuh), 16-byte aligned.
class DqSums {
 public:
  DqSums(const BwdParams& p, int query_tiles, int block_m, int cols, size_t extra_bytes = 0);
  float* accum() const { return static_cast<float*>(scratch_.data()); }
  void* extra() const { return static_cast<char*>(scratch_.data()) + accum_bytes_ + turn_bytes_; }
  int* turns() const { return turns_; }
  int turn_group() const { return turn_group_; }
  int rows_padded() const { return int(layout_.head_rows); }
  const DqLayout& layout() const { return layout_; }

 private:
  DqLayout layout_;
  size_t accum_bytes_, turn_bytes_;
  Scratch scratch_;
  int* turns_;
  int turn_group_;
};

// dq = scale·accum for every row and head: accum holds the fp32 sums of every
// (sequence, q head) as `layout` places them (cols >= head_dim).
void write_dq(const BwdParams& p, const float* accum, const DqLayout& layout);

}  // namespace flashattn::cuda
