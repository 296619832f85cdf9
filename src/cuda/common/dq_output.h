// The fp32 dQ sums of the tensor-core backwards: their zeroed scratch memory
// (with the deterministic mode's turn counters), and the conversion that ends
// every such backward, the sums scaled and rounded into dq.
#pragma once

#include <cstddef>

#include "core/params.h"
#include "cuda/common/scratch.h"

namespace flashattn::cuda {

// One call's sums, zeroed on p's stream: per (batch, q head), rows_padded() =
// query_tiles · block_m rows of cols floats in dq_accum.cuh's layout; in
// deterministic mode also a turn counter per query tile, else turns() is null.
class DqSums {
 public:
  DqSums(const BwdParams& p, int query_tiles, int block_m, int cols);
  float* accum() const { return static_cast<float*>(scratch_.data()); }
  int* turns() const { return turns_; }
  int rows_padded() const { return rows_padded_; }

 private:
  size_t accum_bytes_, turn_bytes_;
  Scratch scratch_;
  int* turns_;
  int rows_padded_;
};

// dq = scale·accum for every row and head: accum holds (batch, heads_q) blocks
// of rows_padded × cols fp32 sums (cols >= head_dim) in dq_accum.cuh's layout.
void write_dq(const BwdParams& p, const float* accum, int rows_padded, int cols);

}  // namespace flashattn::cuda
