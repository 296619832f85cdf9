// Attention on small explicit inputs, for closed-form tests: host float values
// in and out, run by any backend on its own device (inputs copied to the GPU and
// results back for the CUDA backends).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"  // round_to: the value a float becomes when stored in a dtype
#include "flashattn/flashattn.hpp"

namespace flashattn::test {

// A contiguous (batch, seqlen, heads, head_dim) tensor of float values.
struct Dense {
  int batch, seqlen, heads, head_dim;
  std::vector<float> values;

  Dense(int batch, int seqlen, int heads, int head_dim);
  float& at(int b, int s, int h, int c);
  float at(int b, int s, int h, int c) const;
};

struct DenseProblem {
  DenseProblem(Dense q_, Dense k_, Dense v_)
      : q(std::move(q_)), k(std::move(k_)), v(std::move(v_)) {}
  Dense q, k, v;
  DType dtype = DType::f32;
  Mask mask = Mask::none;
  std::optional<float> scale;
  // Variants (flashattn::Variants); the ALiBi slopes (heads_q, empty: none)
  // are copied to the backend's device.
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::vector<float> alibi_slopes;
  // A packed batch (flashattn::Sequences; empty: dense): q, k and v of batch 1
  // hold the sequences one after another, these their prefix sums (copied to
  // the backend's device); lse is then (heads_q, total_q).
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;
};

struct DenseResult {
  Dense out;
  std::vector<float> lse;  // (batch, heads_q, seqlen_q)
  float lse_at(int b, int h, int i) const;
};

// The device a backend runs on (the registry's, flashattn::backends()).
DeviceKind device_of(Backend backend);

// Every backend with every dtype it takes, from the registry.
std::vector<std::tuple<Backend, DType>> backend_dtypes();

// Why `backend` cannot run here (no GPU, or not this GPU's architecture), or
// empty: a test of it skips with this reason.
std::string skip_reason(Backend backend);

// A test run once per (backend, dtype) pair, skipped with skip_reason() where the
// backend cannot run here.
class BackendDtypeTest : public testing::TestWithParam<std::tuple<Backend, DType>> {
 protected:
  void SetUp() override {
    const std::string why = skip_reason(backend());
    if (!why.empty()) GTEST_SKIP() << why;
  }
  Backend backend() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  Device device() const { return {device_of(backend()), 0}; }
};

// "cuda_mma_f16": a BackendDtypeTest instance's name.
std::string backend_dtype_name(const testing::TestParamInfo<std::tuple<Backend, DType>>& info);


// Rounds q, k and v to the problem's dtype in place, so expected values computed
// from them see exactly what the backend sees.
void round_inputs(DenseProblem& problem);

// Runs `backend` with out and lse poisoned with NaN beforehand.
DenseResult run_dense(const DenseProblem& problem, Backend backend);

struct DenseGradients {
  Dense dq, dk, dv;
};

// Runs `backend`'s forward on the problem (packed where it has prefix sums),
// then its backward with dout (out's shape: q's with v's head_dim, contiguous),
// dq, dk and dv poisoned with NaN beforehand.
DenseGradients run_dense_backward(const DenseProblem& problem, const std::vector<float>& dout,
                                  Backend backend);

}  // namespace flashattn::test
