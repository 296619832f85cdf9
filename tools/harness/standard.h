// Standard attention as a user would write it in the tensors' dtype, emulated
// on the CPU: S = Q·Kᵀ rounded to dtype, P = softmax(scale·S) rounded to dtype,
// O = P·V rounded to dtype (fp32 accumulation inside each product, as cuBLAS
// does). Its error sets the fp16/bf16 tolerance: ours may be at most about
// twice that.
#pragma once

#include <vector>

#include "core/params.h"

namespace flashattn::harness {

// Outputs for the given query rows, laid out like cpu::reference_rows.
std::vector<double> standard_rows_in_dtype(const AttnParams& p, const std::vector<int>& rows);

}  // namespace flashattn::harness
