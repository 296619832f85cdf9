// One backward problem with fresh random inputs (q, k, v, dout), on the CPU or a
// GPU: a backend's forward gives out and lse, its backward the gradients, and
// evaluate() scores dq, dk and dv, each on its own, against a float64 oracle.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "problem.h"

namespace flashattn::harness {

struct TensorAccuracy {
  double rel_l2 = 0;           // ‖got − ref‖ / ‖ref‖ (‖got − ref‖ where ref is 0)
  // The larger error of two baselines in the dtype: standard attention's backward,
  // and the exact gradient with D from the stored output (standard_backward.h).
  double standard_rel_l2 = 0;
  double tolerance = 0;
  int64_t unwritten = 0;       // elements still NaN (poison)
  bool passed() const { return unwritten == 0 && rel_l2 <= tolerance; }
};

struct GradAccuracy {
  TensorAccuracy dq, dk, dv;
  bool passed() const { return dq.passed() && dk.passed() && dv.passed(); }
  std::string summary() const;
};

// The backward of forward call `f` (its q, k, v, out, lse, scale, mask,
// variants, backend and stream); the caller sets dout, dq, dk and dv.
BackwardParams backward_of(const Params& f);

class GradProblem {
 public:
  GradProblem(const Case& c, Device device, uint64_t seed);
  ~GradProblem();

  const Case& spec() const { return case_; }
  Params forward_params(Backend backend) const;
  BackwardParams backward_params(Backend backend, bool deterministic = false) const;
  // NaN into every element of dq, dk and dv.
  void poison_gradients();
  // forward() then backward() on `backend`, the gradients poisoned first.
  void run(Backend backend, bool deterministic = false);
  // The gradients last written, as raw bytes (dq, dk, dv), for bitwise comparison.
  std::vector<uint8_t> gradient_bytes() const;
  // Scores the gradients against the library's reference backward (float64),
  // or, for the reference backend itself, against the harness's own float64
  // standard backward (standard_backward.h). fp32: each within the larger of 1e-5
  // and twice the baseline's error; 16-bit: twice the baseline's error plus the
  // output's rounding, and where the gradient's terms sit on 8 elements or fewer
  // at least the most that the dtype's rounding of each term and of the result
  // can move them. The baseline is the worse of standard attention's backward
  // in the dtype and the exact gradient with D from the dtype-rounded output.
  GradAccuracy evaluate(Backend backend);

 private:
  struct Storage;
  Case case_;
  Device device_;
  std::unique_ptr<Storage> storage_;
};

}  // namespace flashattn::harness
