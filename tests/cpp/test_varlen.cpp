// Variable-length batches (flashattn::Sequences): sequences packed along seqlen,
// each its own attention problem, on every backend whose table row says it
// takes them, forward and backward, against float64 oracles computed on each
// sequence alone as a dense batch of one (tools/harness: Problem and
// GradProblem split a packed case into its sequences). Lengths include 0 and 1
// on either side, seqlen_q ≠ seqlen_k within a sequence, rows without keys
// (bottom-right), every mask, windows and score variants. Backends that do not
// take packed batches must refuse them with an error naming `sequences`; the
// checks on the prefix sums must name the entry and write nothing, or, unchecked
// on the GPU, leave every output NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cases.h"
#include "core/half.h"
#include "dense.h"
#include "device_memory.h"
#include "grad_problem.h"
#include "seed.h"

namespace flashattn::test {
namespace {

constexpr Mask kMasks[] = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

harness::Case packed(harness::Shape heads, DType dtype, Mask mask,
                     std::vector<SequenceLengths> sequences, bool strided = false) {
  return harness::packed_case(make_case(heads, dtype, mask, strided), std::move(sequences));
}

// Every sequence length the kernels must handle at the CPU's sizes: empty
// sequences on either side, one row or one key, rows without keys
// (bottom-right, seqlen_q > seqlen_k), and lengths across a tile.
const std::vector<SequenceLengths> kAwkward = {{17, 30}, {0, 5}, {1, 1}, {40, 0},
                                               {70, 33}, {3, 0},  {0, 0}, {65, 130}};

std::vector<harness::Case> varlen_cases() {
  std::vector<harness::Case> cases;
  for (DType dtype : kDtypes)
    for (Mask mask : kMasks) {
      cases.push_back(packed({0, 0, 0, 4, 2, 64}, dtype, mask, kAwkward));
      cases.push_back(packed({0, 0, 0, 2, 1, 80}, dtype, mask, {{130, 70}, {5, 200}}, true));
    }
  for (DType dtype : kDtypes) {
    cases.push_back(packed({0, 0, 0, 1, 1, 1}, dtype, Mask::causal_bottom_right, {{1, 7}, {9, 2}}));
    cases.push_back(packed({0, 0, 0, 3, 3, 200}, dtype, Mask::none, {{20, 31}, {1, 64}}));
    // 192: the Hopper backward's kernel of Sᵀ and dPᵀ 192 deep in the 256 bucket.
    cases.push_back(packed({0, 0, 0, 2, 1, 192}, dtype, Mask::causal_bottom_right,
                           {{100, 70}, {0, 3}, {65, 130}}, true));
    // 384 and 512: the Hopper forward split by columns (rows at a sequence's
    // end stored by hand, each consumer its columns).
    cases.push_back(packed({0, 0, 0, 2, 1, 512}, dtype, Mask::causal_bottom_right,
                           {{100, 70}, {0, 3}, {65, 130}}, true));
    cases.push_back(packed({0, 0, 0, 2, 2, 384}, dtype, Mask::none, kAwkward));
    harness::Case windowed = packed({0, 0, 0, 4, 1, 32}, dtype, Mask::causal_top_left, kAwkward);
    windowed.window_left = 7;
    cases.push_back(windowed);
    harness::Case varied = packed({0, 0, 0, 4, 2, 48}, dtype, Mask::none, {{60, 90}, {90, 60}});
    varied.window_left = 20;
    varied.window_right = 5;
    varied.softcap = 30.0f;
    varied.input_std = 3.0f;
    varied.alibi = true;
    cases.push_back(varied);
    // Unchecked prefix sums (the device checks them; the host always does).
    harness::Case unchecked = packed({0, 0, 0, 4, 2, 64}, dtype, Mask::causal_bottom_right, kAwkward);
    unchecked.checked_sequences = false;
    cases.push_back(unchecked);
  }
  return cases;
}

// The CUDA backends also get sequences that span several of their tiles
// (head dims 64 and 128, the tensor-core kernels' buckets), many short
// sequences beside one long one, and a few query rows over many keys.
std::vector<harness::Case> gpu_varlen_cases() {
  std::vector<harness::Case> cases = varlen_cases();
  for (DType dtype : kDtypes)
    for (Mask mask : kMasks) {
      cases.push_back(packed({0, 0, 0, 4, 1, 128}, dtype, mask,
                             {{1000, 1000}, {257, 300}, {0, 64}, {129, 1000}, {64, 64}}));
      std::vector<SequenceLengths> many(24, SequenceLengths{37, 37});
      many.push_back({1500, 1500});
      cases.push_back(packed({0, 0, 0, 2, 2, 64}, dtype, mask, many, true));
    }
  // More tiles than SMs, so that persistent blocks take a tile after one with
  // keys: each tile's rows past the first 64 lie past its sequence's, and its
  // first key block runs past the sequence's end (cuda_wgmma's d128 kernel
  // deadlocked there while the first warpgroup still owed the last tile's P·V;
  // at d64, three warpgroups, two of them without rows).
  for (int head_dim : {64, 128})
    for (DType dtype : kDtypes)
      cases.push_back(packed({0, 0, 0, 4, 2, head_dim}, dtype, Mask::none,
                             std::vector<SequenceLengths>(80, SequenceLengths{40, 100})));
  for (DType dtype : kDtypes) {
    harness::Case windowed =
        packed({0, 0, 0, 2, 1, 128}, dtype, Mask::causal_bottom_right, {{700, 900}, {900, 700}});
    windowed.window_left = 256;
    windowed.alibi = true;
    cases.push_back(windowed);
    cases.push_back(packed({0, 0, 0, 8, 2, 128}, dtype, Mask::causal_bottom_right,
                           {{2, 3000}, {1, 2000}, {4, 100}}));
    std::vector<SequenceLengths> many(24, SequenceLengths{37, 37});
    many.push_back({1500, 1500});
    harness::Case unchecked = packed({0, 0, 0, 2, 2, 128}, dtype, Mask::causal_top_left, many);
    unchecked.checked_sequences = false;
    cases.push_back(unchecked);
    // 264 on Hopper: K and V copied into sector-aligned rows first (a sequence
    // of 1100 rows on four query heads a kv head; sm90/aligned_kv.h).
    cases.push_back(packed({0, 0, 0, 8, 2, 264}, dtype, Mask::none,
                           {{1100, 300}, {0, 5}, {70, 33}}));
  }
  return cases;
}

bool takes_sequences(Backend backend) {
  for (const BackendInfo& info : backends())
    if (info.backend == backend) return info.takes_sequences;
  return false;
}

// The cases a backend's table takes (cases_taken_by).
std::vector<harness::Case> cases_for(Backend backend) {
  const bool gpu = device_of(backend) == DeviceKind::cuda;
  return cases_taken_by(backend, gpu ? gpu_varlen_cases() : varlen_cases());
}

std::vector<BackendCase> forward_cases() {
  std::vector<BackendCase> out;
  for (const BackendInfo& info : backends())
    if (info.takes_sequences)
      for (const harness::Case& c : cases_for(info.backend)) out.push_back({info.backend, c});
  return out;
}

bool takes_backward_sequences(Backend backend) {
  for (const BackendInfo& info : backends())
    if (info.backend == backend) return info.takes_backward_sequences;
  return false;
}

std::vector<BackendCase> backward_cases() {
  std::vector<BackendCase> out;
  for (Backend backend : backward_backends())
    if (takes_backward_sequences(backend))
      for (const harness::Case& c : cases_for(backend))
        if (takes_backward(backend, c)) out.push_back({backend, c});
  return out;
}

class VarlenForward : public BackendCaseTest {};

TEST_P(VarlenForward, MatchesEachSequenceAlone) { expect_accurate(GetParam(), device()); }

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenForward, testing::ValuesIn(forward_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

class VarlenBackward : public BackendCaseTest {};

TEST_P(VarlenBackward, GradientsMatchEachSequenceAlone) {
  const BackendCase& bc = GetParam();
  expect_gradients_accurate(bc, device());
  // The deterministic mode holds for packed batches too: bit-identical twice.
  harness::GradProblem problem(bc.c, device(), fresh_seed());
  problem.run(bc.backend, true);
  const std::vector<uint8_t> first = problem.gradient_bytes();
  problem.run(bc.backend, true);
  EXPECT_TRUE(first == problem.gradient_bytes()) << "deterministic gradients differ between runs";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenBackward, testing::ValuesIn(backward_cases()),
                         [](const auto& info) { return backend_case_name(info.param); });

// A sequence sees only its own rows, keys and values: NaN in every query,
// key and value of its neighbour (and, backward, in its output gradient)
// reaches none of its rows, though the tiles of the tensor-core kernels read
// across the ends of the sequences (a short sequence's one key block holds the
// next one's keys; a tile's last rows, the next one's rows). Checked element by
// element against the float64 reference on the same packed batch, which
// computes each sequence alone: out, and where the backend's backward takes
// packed batches, dq, dk and dv.
class VarlenIsolation : public BackendDtypeTest {};

// Counts the elements of `got` that differ from `want`: NaN where the reference
// has NaN, else within tolerance · (scale + |want|); reports the first few.
// Rows [skip_begin, skip_end) are not compared.
int isolation_mismatches(const std::vector<float>& want, const std::vector<float>& got,
                         double tolerance, double scale, const std::string& what,
                         int row_elements, int skip_begin = 0, int skip_end = 0) {
  int mismatches = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    const int row = int(e / row_elements);
    if (row >= skip_begin && row < skip_end) continue;
    const float w = want[e], g = got[e];
    const bool ok = std::isnan(w) ? std::isnan(g)
                                  : std::fabs(double(g) - w) <= tolerance * (scale + std::fabs(w));
    if (!ok && ++mismatches <= 5)
      ADD_FAILURE() << what << ": element " << e << " (row " << e / row_elements << ") is " << g
                    << ", the reference gives " << w;
  }
  return mismatches;
}

TEST_P(VarlenIsolation, NonFiniteNeighboursStayOut) {
  const std::vector<SequenceLengths> lengths = {{70, 33}, {40, 200}, {130, 75}, {3, 9}};
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (const SequenceLengths& l : lengths) {
    cu_q.push_back(cu_q.back() + l.seqlen_q);
    cu_k.push_back(cu_k.back() + l.seqlen_k);
  }
  for (int head_dim : {64, 128}) {
    if (!backend_supports(backend(), dtype(), head_dim)) continue;
    for (Mask mask : kMasks) {
      DenseProblem problem{Dense(1, cu_q.back(), 2, head_dim), Dense(1, cu_k.back(), 1, head_dim),
                           Dense(1, cu_k.back(), 1, head_dim)};
      double phase = 0.0;
      for (Dense* t : {&problem.q, &problem.k, &problem.v}) {
        for (size_t e = 0; e < t->values.size(); ++e)
          t->values[e] = float(std::sin(1.3 * double(e) + phase));
        phase += 0.9;
      }
      const auto plant = [](Dense& t, int row0, int row_end) {
        for (int r = row0; r < row_end; ++r)
          for (int h = 0; h < t.heads; ++h)
            for (int c = 0; c < t.head_dim; ++c) t.at(0, r, h, c) = std::nanf("");
      };
      plant(problem.q, cu_q[1], cu_q[2]);
      plant(problem.k, cu_k[1], cu_k[2]);
      plant(problem.v, cu_k[1], cu_k[2]);
      problem.dtype = dtype();
      problem.mask = mask;
      problem.cu_seqlens_q = cu_q;
      problem.cu_seqlens_k = cu_k;
      round_inputs(problem);
      const DenseResult want = run_dense(problem, Backend::reference);
      const DenseResult got = run_dense(problem, backend());
      const double tolerance = dtype() == DType::f32 ? 1e-4 : dtype() == DType::f16 ? 1e-2 : 4e-2;
      const std::string where = "head_dim " + std::to_string(head_dim) + ", mask " +
                                std::to_string(int(mask));
      EXPECT_EQ(isolation_mismatches(want.out.values, got.out.values, tolerance, 1.0,
                                     where + ", out", 2 * head_dim),
                0)
          << where;
      if (!takes_backward_sequences(backend())) continue;
      // Backward: dout NaN on the neighbour's rows too. The other sequences'
      // gradients are compared (within the neighbour, a key no row sees may
      // take 0·NaN from its own rows, as standard attention's backward does);
      // gradients grow with the sequence, so the tolerance scales with each
      // tensor's largest value.
      std::vector<float> dout(problem.q.values.size());
      for (size_t e = 0; e < dout.size(); ++e)
        dout[e] = round_to(dtype(), float(std::cos(0.7 * double(e))));
      for (int r = cu_q[1]; r < cu_q[2]; ++r)
        for (int e = 0; e < 2 * head_dim; ++e) dout[size_t(r) * 2 * head_dim + e] = std::nanf("");
      const DenseGradients want_grad = run_dense_backward(problem, dout, Backend::reference);
      const DenseGradients got_grad = run_dense_backward(problem, dout, backend());
      const struct {
        const char* name;
        const Dense& want;
        const Dense& got;
        const std::vector<int32_t>& cu;
      } grads[] = {{"dq", want_grad.dq, got_grad.dq, cu_q},
                   {"dk", want_grad.dk, got_grad.dk, cu_k},
                   {"dv", want_grad.dv, got_grad.dv, cu_k}};
      for (const auto& grad : grads) {
        double largest = 0.0;
        for (float w : grad.want.values)
          if (std::isfinite(w)) largest = std::max(largest, double(std::fabs(w)));
        EXPECT_EQ(isolation_mismatches(grad.want.values, grad.got.values, tolerance,
                                       std::max(1.0, largest), where + ", " + grad.name,
                                       grad.want.heads * head_dim, grad.cu[1], grad.cu[2]),
                  0)
            << where << ", " << grad.name;
      }
    }
  }
}

// The backends under test for packed batches, with their dtypes: those that
// take sequences, the reference (the oracle) aside; instantiated for those
// alone, so that no case skips on a GPU.
std::vector<std::tuple<Backend, DType>> packed_backend_dtypes() {
  std::vector<std::tuple<Backend, DType>> out;
  for (const std::tuple<Backend, DType>& bd : backend_dtypes())
    if (takes_sequences(std::get<0>(bd)) && std::get<0>(bd) != Backend::reference) out.push_back(bd);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenIsolation, testing::ValuesIn(packed_backend_dtypes()),
                         backend_dtype_name);

// Runs `pass` (forward, or forward and backward) of `backend` on a small
// packed batch, which must be refused as unsupported with an error naming
// `sequences`.
template <typename Run>
void expect_sequences_refused(Backend backend, DType dtype, const char* what, Run&& pass) {
  harness::GradProblem problem(packed({0, 0, 0, 2, 1, 64}, dtype, Mask::none, {{10, 20}, {5, 5}}),
                               {device_of(backend), 0}, fresh_seed());
  try {
    pass(problem);
    FAIL() << what << " accepted a packed batch";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("sequences:"), std::string::npos) << e.what();
  }
}

// A backend whose backward does not take packed batches refuses them, naming
// the argument (none in the table now: every backend whose forward takes them
// has a backward that does too, or none).
class VarlenBackwardRefused : public testing::TestWithParam<Backend> {};

TEST_P(VarlenBackwardRefused, NamesSequences) {
  const Backend backend = GetParam();
  const std::string why = skip_reason(backend);
  if (!why.empty()) GTEST_SKIP() << why;
  expect_sequences_refused(backend, DType::f16, "backward",
                           [&](harness::GradProblem& problem) { problem.run(backend); });
}

std::vector<Backend> backward_refusing_backends() {
  std::vector<Backend> out;
  for (const BackendInfo& info : backends())
    if (info.takes_sequences && info.has_backward() && !info.takes_backward_sequences &&
        info.takes(DType::f16))
      out.push_back(info.backend);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenBackwardRefused,
                         testing::ValuesIn(backward_refusing_backends()),
                         [](const auto& info) { return std::string(to_string(info.param)); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VarlenBackwardRefused);

// A backend that does not take packed batches refuses them, naming the
// argument.
class VarlenRefused : public testing::TestWithParam<Backend> {};

TEST_P(VarlenRefused, NamesSequences) {
  const Backend backend = GetParam();
  const std::string why = skip_reason(backend);
  if (!why.empty()) GTEST_SKIP() << why;
  const DType dtype = backend_supports(backend, DType::f16, 64) ? DType::f16 : DType::f32;
  expect_sequences_refused(backend, dtype, "forward", [&](harness::GradProblem& problem) {
    forward(problem.forward_params(backend));
  });
}

std::vector<Backend> refusing_backends() {
  std::vector<Backend> out;
  for (const BackendInfo& info : backends())
    if (!info.takes_sequences) out.push_back(info.backend);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenRefused, testing::ValuesIn(refusing_backends()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Unchecked prefix sums (Sequences::checked false) on the GPU: the call waits
// for nothing, so broken sums get no error; the device check gives every
// element of out and lse (a backward: dq, dk, dv) NaN instead, reads and
// writes nothing outside the tensors (the sanitizer runs this suite), and the
// same arguments with valid sums give finite outputs. Without max_seqlen, or
// with 0 where the tensor has rows, the call is refused, naming it.
struct BrokenSums {
  std::string name;
  std::vector<int32_t> cu_q, cu_k;
  int64_t max_seqlen_q = 64, max_seqlen_k = 64;
};

const BrokenSums kBrokenSums[] = {
    {"first_not_zero", {1, 10, 15}, {0, 20, 25}},
    {"negative", {0, -5, 15}, {0, 20, 25}},
    {"decreasing", {0, 10, 15}, {0, 26, 25}},
    {"short_of_total", {0, 10, 14}, {0, 20, 25}},
    {"far_past_total", {0, 10, 15}, {0, 20, 1 << 30}, 64, int64_t(1) << 31},
    {"longer_than_max_seqlen_q", {0, 10, 15}, {0, 20, 25}, 9, 64},
    {"longer_than_max_seqlen_k", {0, 10, 15}, {0, 20, 25}, 64, 19},
};

class VarlenUnchecked : public testing::TestWithParam<Backend> {};

// Whether every element of a downloaded tensor is NaN, or none is.
enum class Expect { all_nan, all_finite };

void expect_elements(const std::vector<uint8_t>& bytes, DType dtype, Expect expect,
                     const std::string& what) {
  const int64_t n = int64_t(bytes.size() / dtype_size(dtype));
  int64_t wrong = 0;
  for (int64_t e = 0; e < n; ++e) {
    const float x = load_float(bytes.data(), dtype, e);
    wrong += expect == Expect::all_nan ? !std::isnan(x) : !std::isfinite(x);
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << n << " elements are "
                      << (expect == Expect::all_nan ? "not NaN" : "not finite");
}

TEST_P(VarlenUnchecked, BrokenSumsGiveNaN) {
  const Backend backend = GetParam();
  const std::string why = skip_reason(backend);
  if (!why.empty()) GTEST_SKIP() << why;
  const DType dtype = backend_supports(backend, DType::bf16, 64) ? DType::bf16 : DType::f32;
  harness::GradProblem problem(packed({0, 0, 0, 2, 1, 64}, dtype, Mask::causal_bottom_right,
                                      {{10, 20}, {5, 5}}),
                               {DeviceKind::cuda, 0}, fresh_seed());
  const bool has_backward = takes_backward_sequences(backend);
  if (has_backward) problem.run(backend);  // the lse the backward reads
  const Params base = problem.forward_params(backend);
  const int64_t total_q = base.q.shape[1], total_k = base.k.shape[1];
  const size_t elem = dtype_size(dtype);
  const auto zeros = [](size_t bytes) {
    harness::DeviceBuffer buffer(bytes, 0);
    const std::vector<uint8_t> host(bytes, 0);
    buffer.upload(host.data());
    return buffer;
  };
  const auto download = [](const harness::DeviceBuffer& buffer) {
    std::vector<uint8_t> host(buffer.size());
    buffer.download(host.data());
    return host;
  };
  std::vector<BrokenSums> runs(std::begin(kBrokenSums), std::end(kBrokenSums));
  runs.push_back({"valid", {0, 10, 15}, {0, 20, 25}});
  for (const BrokenSums& run : runs) {
    SCOPED_TRACE(run.name);
    const Expect expect = run.name == "valid" ? Expect::all_finite : Expect::all_nan;
    harness::DeviceBuffer cu_q(3 * sizeof(int32_t), 0), cu_k(3 * sizeof(int32_t), 0);
    cu_q.upload(run.cu_q.data());
    cu_k.upload(run.cu_k.data());
    const Sequences sequences{static_cast<const int32_t*>(cu_q.data()),
                              static_cast<const int32_t*>(cu_k.data()), 2, run.max_seqlen_q,
                              run.max_seqlen_k, false};
    harness::DeviceBuffer out = zeros(size_t(total_q) * 2 * 64 * elem);
    harness::DeviceBuffer lse = zeros(size_t(total_q) * 2 * sizeof(float));
    Params p = base;
    p.out = contiguous_view(out.data(), dtype, 1, total_q, 2, 64, {DeviceKind::cuda, 0});
    p.lse = static_cast<float*>(lse.data());
    p.sequences = sequences;
    forward(p);
    harness::device_synchronize(0);
    expect_elements(download(out), dtype, expect, "out");
    expect_elements(download(lse), DType::f32,
                    expect == Expect::all_nan ? Expect::all_nan : Expect::all_finite, "lse");
    if (!has_backward) continue;
    BackwardParams g = problem.backward_params(backend);
    harness::DeviceBuffer dq = zeros(size_t(total_q) * 2 * 64 * elem);
    harness::DeviceBuffer dk = zeros(size_t(total_k) * 64 * elem);
    harness::DeviceBuffer dv = zeros(size_t(total_k) * 64 * elem);
    g.dq = contiguous_view(dq.data(), dtype, 1, total_q, 2, 64, {DeviceKind::cuda, 0});
    g.dk = contiguous_view(dk.data(), dtype, 1, total_k, 1, 64, {DeviceKind::cuda, 0});
    g.dv = contiguous_view(dv.data(), dtype, 1, total_k, 1, 64, {DeviceKind::cuda, 0});
    g.sequences = sequences;
    backward(g);
    harness::device_synchronize(0);
    expect_elements(download(dq), dtype, expect, "dq");
    expect_elements(download(dk), dtype, expect, "dk");
    expect_elements(download(dv), dtype, expect, "dv");
  }
  Params p = base;
  p.sequences.checked = false;
  p.sequences.max_seqlen_q = -1;
  p.sequences.max_seqlen_k = 64;
  expect_forward_rejected(p, "sequences.max_seqlen_q: is not given (-1); unchecked prefix sums");
  p.sequences.max_seqlen_q = 0;  // q has rows: a maximum of 0 is wrong without the sums
  expect_forward_rejected(p, "sequences.max_seqlen_q: is 0, but q holds 15 rows");
}

std::vector<Backend> gpu_sequence_backends() {
  std::vector<Backend> out;
  for (const BackendInfo& info : backends())
    if (info.takes_sequences && device_of(info.backend) == DeviceKind::cuda)
      out.push_back(info.backend);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, VarlenUnchecked, testing::ValuesIn(gpu_sequence_backends()),
                         [](const auto& info) { return std::string(to_string(info.param)); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VarlenUnchecked);

// Bad prefix sums or max_seqlen values, on the CPU: each error names the
// argument and the rule, and neither out nor lse is written.
struct BadSequences {
  std::string name;
  std::vector<int32_t> cu_q, cu_k;
  int batch;
  std::string message;
  int64_t max_seqlen_q = -1, max_seqlen_k = -1;
};

class VarlenValidation : public testing::TestWithParam<BadSequences> {};

TEST_P(VarlenValidation, RejectsAndWritesNothing) {
  const BadSequences& bad = GetParam();
  constexpr int kTotalQ = 10, kTotalK = 12, kHeads = 2, kDim = 8;
  std::vector<float> q(kTotalQ * kHeads * kDim, 1.0f), k(kTotalK * kHeads * kDim, 1.0f);
  std::vector<float> v = k, out(q.size(), -7.0f), lse(kHeads * kTotalQ, -7.0f);
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, 1, kTotalQ, kHeads, kDim);
  p.k = contiguous_view(k.data(), DType::f32, 1, kTotalK, kHeads, kDim);
  p.v = contiguous_view(v.data(), DType::f32, 1, kTotalK, kHeads, kDim);
  p.out = contiguous_view(out.data(), DType::f32, 1, kTotalQ, kHeads, kDim);
  p.lse = lse.data();
  p.sequences = {bad.cu_q.empty() ? nullptr : bad.cu_q.data(),
                 bad.cu_k.empty() ? nullptr : bad.cu_k.data(), bad.batch, bad.max_seqlen_q,
                 bad.max_seqlen_k};
  expect_forward_rejected(p, bad.message);
  for (float x : out) ASSERT_EQ(x, -7.0f);
  for (float x : lse) ASSERT_EQ(x, -7.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VarlenValidation,
    testing::Values(
        BadSequences{"k_missing", {0, 4, 10}, {}, 2, "sequences.cu_seqlens_k: is null"},
        BadSequences{"q_missing", {}, {0, 6, 12}, 2, "sequences.cu_seqlens_q: is null"},
        BadSequences{"negative_batch", {0, 4, 10}, {0, 6, 12}, -1, "sequences.batch: is -1"},
        BadSequences{"first_not_zero", {1, 4, 10}, {0, 6, 12}, 2,
                     "sequences.cu_seqlens_q: entry 0 is 1, must be 0"},
        BadSequences{"decreasing", {0, 4, 10}, {0, 7, 6}, 2,
                     "sequences.cu_seqlens_k: entry 2 (6) is less than entry 1 (7)"},
        BadSequences{"short_of_total", {0, 4, 9}, {0, 6, 12}, 2,
                     "sequences.cu_seqlens_q: last entry is 9, must equal q's seqlen (10)"},
        BadSequences{"past_total", {0, 4, 10}, {0, 6, 13}, 2,
                     "sequences.cu_seqlens_k: last entry is 13, must equal k's seqlen (12)"},
        BadSequences{"max_seqlen_q_short", {0, 4, 10}, {0, 6, 12}, 2,
                     "sequences.max_seqlen_q: is 5, less than the longest sequence in "
                     "cu_seqlens_q (sequence 1: 6 = cu_seqlens_q[2] - cu_seqlens_q[1])",
                     5},
        BadSequences{"max_seqlen_k_short", {0, 4, 10}, {0, 6, 12}, 2,
                     "sequences.max_seqlen_k: is 0, less than the longest sequence in "
                     "cu_seqlens_k (sequence 0: 6 = cu_seqlens_k[1] - cu_seqlens_k[0])",
                     -1, 0},
        BadSequences{"max_seqlen_below_minus_one", {0, 4, 10}, {0, 6, 12}, 2,
                     "sequences.max_seqlen_k: is -2, must be >= 0, or -1 (not given)", 6, -2}),
    [](const auto& info) { return info.param.name; });

// The tensors of a packed batch have batch 1.
TEST(VarlenValidation, TensorsOfOneBatchIndex) {
  std::vector<float> data(2 * 5 * 8, 0.0f), out(data.size(), -7.0f);
  std::vector<int32_t> cu = {0, 5};
  Params p;
  p.q = contiguous_view(data.data(), DType::f32, 2, 5, 1, 8);
  p.k = p.q;
  p.v = p.q;
  p.out = contiguous_view(out.data(), DType::f32, 2, 5, 1, 8);
  p.sequences = {cu.data(), cu.data(), 1};
  expect_forward_rejected(p, "q: batch is 2");
  for (float x : out) ASSERT_EQ(x, -7.0f);
}

}  // namespace
}  // namespace flashattn::test
