// The randomised backend cases: one list of awkward shapes, dtypes, masks and
// layouts that every backend must get right, shared by the CPU and CUDA suites,
// and the check that runs one backend on one case.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dense.h"
#include "problem.h"

namespace flashattn::test {

// Seqlen 1, 17, 1000, 4097; head_dim 1, 3, 80, 200, 1024; seqlen_q ≠ seqlen_k
// both ways; GQA and MQA; strided views; both causal alignments; custom scales;
// batch > 1; each in f32, f16 and bf16. Sized so the CPU backends run the whole
// list in seconds.
std::vector<harness::Case> shared_cases();

// One case of the given shape, dtype and mask; strided views with the given
// padding if `strided` (harness::Case).
harness::Case make_case(harness::Shape shape, DType dtype, Mask mask, bool strided = false,
                        int strided_pad = 3);

// A unique, gtest-safe name, e.g. "B1_Nq17_Nk17_Hq1_Hkv1_d3_f16_causal_br_strided",
// or with variants "..._window_3_open_softcap30_alibi_bias_bool_bcast_heads".
std::string case_name(const harness::Case& c);

struct BackendCase {
  Backend backend;
  harness::Case c;
};
std::vector<BackendCase> with_backends(const std::vector<Backend>& backends,
                                       const std::vector<harness::Case>& cases);
// The cases whose tensors cuda_wgmma's TMA can describe: 16-bit, head_dim a
// multiple of 8, strided views padded to keep rows 16-byte aligned.
std::vector<harness::Case> tma_cases(const std::vector<harness::Case>& cases);
// The cases `backend`'s table takes (dtype, head_dims); cuda_wgmma's as
// tma_cases gives them.
std::vector<harness::Case> cases_taken_by(Backend backend, const std::vector<harness::Case>& cases);
// The backends whose products are tiles: a non-finite value of v reaches, as
// 0·v, rows that share its key tile without seeing it (docs/guide.md).
bool tiles_values(Backend b);

// forward(p) must be rejected as an invalid argument whose message contains
// `message` (the caller then checks that the outputs were left as they were).
inline void expect_forward_rejected(const Params& p, const std::string& message) {
  try {
    forward(p);
    ADD_FAILURE() << "accepted; expected an error containing '" << message << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

// The backends with a backward, and whether `backend`'s backward takes c's
// dtype and head_dim (the registry's table).
std::vector<Backend> backward_backends();
bool takes_backward(Backend backend, const harness::Case& c);
// "cpu_B1_Nq17_...": for INSTANTIATE_TEST_SUITE_P's name generator.
std::string backend_case_name(const BackendCase& bc);
void PrintTo(const BackendCase& bc, std::ostream* out);

// A test run once per BackendCase, skipped with skip_reason() where the backend
// cannot run here.
class BackendCaseTest : public testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    const std::string why = skip_reason(GetParam().backend);
    if (!why.empty()) GTEST_SKIP() << why;
  }
  Device device() const { return {device_of(GetParam().backend), 0}; }
};

// Runs bc.backend on a fresh random problem of bc.c on `device` (seed printed on
// failure) and expects out and lse to pass harness::Accuracy: fp32 within 1e-5
// relative L2, 16-bit within twice standard attention's error in that dtype,
// every element written, lse within 1e-3.
void expect_accurate(const BackendCase& bc, Device device);

// The same for bc.backend's forward then backward: dq, dk and dv each pass
// harness::GradAccuracy against the float64 reference backward.
void expect_gradients_accurate(const BackendCase& bc, Device device);

}  // namespace flashattn::test
