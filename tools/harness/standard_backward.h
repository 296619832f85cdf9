// Standard attention's backward, as a user would write it, on host tensors:
//   S = Q·Kᵀ, P = softmax(scale·S), O = P·V,
//   dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(dP∘P)), dQ = scale·dS·K,
//   dK = scale·dSᵀ·Q,
// with every product's sum in the arithmetic's own precision. Two uses:
//   - in float64 with no rounding: an oracle apart from the library's reference
//     backend (src/cpu/reference_backward.cpp), to check that backend against;
//   - in fp32 with each product's result rounded to a 16-bit dtype (as PyTorch's
//     math backend in that dtype does): its error sets the 16-bit tolerance.
// Keys a row does not see take no part; a row that sees no key gets dq 0 and
// adds nothing (the library's rule).
#pragma once

#include <vector>

#include "core/params.h"

namespace flashattn::harness {

// Contiguous (batch, seqlen, heads, head_dim) float tensors.
struct HostGradients {
  std::vector<double> dq, dk, dv;
};

struct HostProblem {
  Sizes sizes;
  RowMask mask;
  float scale;
  const std::vector<float>* q;     // the inputs' values (already rounded to their dtype)
  const std::vector<float>* k;
  const std::vector<float>* v;
  const std::vector<float>* dout;
};

HostGradients standard_backward_float64(const HostProblem& p);
HostGradients standard_backward_in_dtype(const HostProblem& p, DType dtype);

}  // namespace flashattn::harness
