// Standard attention's backward, as a user would write it, on host tensors:
//   S = Q·Kᵀ, X = rule(scale·S), P = softmax(X), O = P·V,
//   dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(dP∘P))∘rule', dQ = scale·dS·K,
//   dK = scale·dSᵀ·Q,
// with rule the variants' change of a scaled score (score_rule.h; softcap,
// ALiBi and a bias) and rule' its derivative, and every product's sum in the
// arithmetic's own precision. Two uses:
//   - in float64 with no rounding: an oracle apart from the library's reference
//     backend (src/cpu/reference_backward.cpp), to check that backend against;
//   - in fp32 with each product's result rounded to a 16-bit dtype (as PyTorch's
//     math backend in that dtype does): its error sets the 16-bit tolerance.
// Keys a row does not see take no part; a row that sees no key, or with a bias
// one whose every score is −inf, gets dq 0 and adds nothing (the library's rule).
#pragma once

#include <vector>

#include "core/params.h"
#include "score_rule.h"

namespace flashattn::harness {

// Contiguous (batch, seqlen, heads, head_dim) float tensors (dv and v: head_dim_v).
struct HostGradients {
  std::vector<double> dq, dk, dv;
  // The sums of the terms' magnitudes (|ds|·|k| … with |ds| bounded by
  // p·(|dp| + |D|)): what rounding errors scale with where terms cancel (a row
  // with one visible key has ds = 0 exactly, as the difference of two equal
  // numbers). standard_backward_float64 only.
  std::vector<double> dq_mag, dk_mag, dv_mag;
  // The sums of the terms' squares (ds·k, ds·q, p·dO): a 16-bit backward rounds
  // each term's factor (ds, p) to the dtype, so its error is that rounding of
  // each term, whatever the sum's cancellation leaves. standard_backward_float64 only.
  std::vector<double> dq_terms_sq, dk_terms_sq, dv_terms_sq;
};

struct HostProblem {
  Sizes sizes;
  RowMask mask;  // the keys each row sees (a window's included)
  float scale;
  ScoreRule rule;
  const std::vector<float>* q;     // the inputs' values (already rounded to their dtype)
  const std::vector<float>* k;
  const std::vector<float>* v;
  const std::vector<float>* dout;
};

HostGradients standard_backward_float64(const HostProblem& p);
// In fp32 arithmetic, each product's result rounded to dtype (f32: not rounded).
HostGradients standard_backward_in_dtype(const HostProblem& p, DType dtype);

// The exact gradients (float64) but for what every flash backward inherits from
// its forward: P = e^(s − lse) with s an fp32 dot product and lse an fp32 value
// from the forward's own fp32 scores (a relative error in P of about |s|·2^-24
// times the rounding steps, which no normalisation undoes, as the backward's
// scores and the forward's lse come from two computations), and D = rowsum(dO∘O)
// from the output O as a flash forward in dtype stores it: its weights e^(s − m)
// rounded to dtype for the product with V (as standard attention rounds P),
// their fp32 sum unrounded, O rounded to dtype.
// Where the softmax is sharp, dP − D cancels and this error can exceed standard
// attention's in the dtype, whose D (rowsum(dP∘P)) is consistent with its own P.
HostGradients exact_backward_from_stored_output(const HostProblem& p, DType dtype);
// As exact_backward_from_stored_output, with D = rowsum(dO∘O) from `out`, the
// output a backend's forward stored (contiguous, its values in their dtype;
// an element more than two ulps off the modelled O's is taken from the model):
// what that backend's backward inherits. Its O rounds values a little off the
// modelled one's, so which elements round up differs, and where the softmax is
// sharp and a head has few rows, that one draw of D's rounding can set dS's
// error at over twice the modelled draw's (one seed in about 150 of a one-row
// bf16 case with a window, softcap and ALiBi).
HostGradients exact_backward_from_output(const HostProblem& p, DType dtype,
                                         const std::vector<float>& out);

}  // namespace flashattn::harness
