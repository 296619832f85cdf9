// The conversion that ends every tensor-core backward: the fp32 dQ sums, added
// by the key-tile blocks in dq_accum.cuh's layout, scaled and rounded into dq.
#pragma once

#include "core/params.h"

namespace flashattn::cuda {

// dq = scale·accum for every row and head: accum holds (batch, heads_q) blocks
// of rows_padded × cols fp32 sums (cols >= head_dim) in dq_accum.cuh's layout.
void write_dq(const BwdParams& p, const float* accum, int rows_padded, int cols);

}  // namespace flashattn::cuda
