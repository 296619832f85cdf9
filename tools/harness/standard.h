// Standard attention as a user would write it in the tensors' dtype, emulated
// on the CPU: S = Q·Kᵀ rounded to dtype, P = softmax(rule(scale·S)) rounded to
// dtype, O = P·V rounded to dtype (fp32 accumulation inside each product, as
// cuBLAS does; the variants' rule in fp32, as a fused elementwise kernel would
// apply it). Its error sets the fp16/bf16 tolerance: ours may be at most about
// twice that. Both computations here take the keys a row sees from p's mask
// (the window included) and softcap, ALiBi and the bias from `rule`
// (score_rule.h), p's own variants unread. With a bias, a row whose every score
// is −inf gives 0 (and lse −inf), as a row without keys does.
#pragma once

#include <vector>

#include "core/params.h"
#include "score_rule.h"

namespace flashattn::harness {

// Outputs for the given query rows, laid out like cpu::reference_rows.
std::vector<double> standard_rows_in_dtype(const AttnParams& p, const ScoreRule& rule,
                                           const std::vector<int>& rows);

// Standard attention in float64 for the given query rows, computed here, apart
// from the library's reference backend (src/cpu/reference.cpp), so that
// `flashattn check` and the tests can check that backend against something
// other than itself: outputs laid out like reference_rows, lse into `lse`
// (batch, heads_q, rows.size()). Rows the mask leaves without keys, and with a
// bias rows of only −inf scores, give 0 and −inf; any other row follows IEEE
// arithmetic (0/0 is NaN).
std::vector<double> standard_rows_float64(const AttnParams& p, const ScoreRule& rule,
                                          const std::vector<int>& rows, std::vector<double>& lse);

}  // namespace flashattn::harness
