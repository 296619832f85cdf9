#include "cases.h"

#include "grad_problem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "bias.h"
#include "grad_problem.h"
#include "seed.h"

namespace flashattn::test {
namespace {

struct Spec {
  harness::Shape shape;  // batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim
  Mask mask;
  bool strided;
  std::optional<float> scale;

  Spec(harness::Shape s, Mask m = Mask::none, bool strided_views = false,
          std::optional<float> custom_scale = std::nullopt)
      : shape(s), mask(m), strided(strided_views), scale(custom_scale) {}
};

// Each spec stresses one or two awkward features; the CPU tiles are 32 query
// × 64 key rows and the CUDA tiles 64 × 64, so lengths like 17, 65, 130 and
// 4097 leave partial tiles at the edges.
const std::vector<Spec> kSpecs = {
    {{1, 1, 1, 1, 1, 1}},                                // everything 1
    {{1, 1, 1, 2, 1, 64}},                               // seqlen 1
    {{1, 1, 300, 2, 2, 32}, Mask::causal_bottom_right},  // one query sees every key
    {{1, 300, 1, 2, 2, 32}, Mask::causal_bottom_right},  // only the last row sees a key
    {{1, 17, 17, 3, 3, 3}, Mask::causal_top_left},
    {{2, 17, 17, 2, 2, 80}, Mask::none, true},
    {{1, 33, 40, 1, 1, 200}, Mask::causal_bottom_right},
    {{1, 20, 24, 1, 1, 1024}},  // large head_dim, short sequences
    {{1, 1000, 1000, 2, 1, 48}, Mask::causal_top_left},
    {{1, 4097, 4097, 1, 1, 8}},  // long, but one narrow head
    {{1, 50, 130, 2, 2, 16}},    // seqlen_q < seqlen_k ...
    {{1, 50, 130, 2, 2, 16}, Mask::causal_top_left},
    {{1, 50, 130, 2, 2, 16}, Mask::causal_bottom_right},
    {{1, 130, 50, 2, 2, 16}},  // ... and seqlen_q > seqlen_k
    {{1, 130, 50, 2, 2, 16}, Mask::causal_top_left},
    {{1, 130, 50, 2, 2, 16}, Mask::causal_bottom_right},       // rows with no visible key
    {{1, 40, 70, 8, 2, 32}, Mask::causal_bottom_right, true},  // GQA
    {{2, 40, 70, 4, 1, 32}, Mask::causal_top_left},            // MQA
    {{1, 65, 65, 2, 2, 64}, Mask::none, false, 0.3f},
    {{1, 65, 65, 2, 2, 16}, Mask::causal_top_left, true, 1.5f},
    {{1, 65, 65, 2, 2, 32}, Mask::none, false, 1e-3f},         // nearly uniform weights
    {{3, 31, 45, 2, 1, 24}, Mask::causal_bottom_right, true},  // batch > 1
};

}  // namespace

std::vector<harness::Case> shared_cases() {
  std::vector<harness::Case> cases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const Spec& v : kSpecs) {
      harness::Case c;
      c.shape = v.shape;
      c.dtype = dtype;
      c.mask = v.mask;
      c.strided = v.strided;
      c.scale = v.scale;
      cases.push_back(c);
    }
  return cases;
}

harness::Case make_case(harness::Shape shape, DType dtype, Mask mask, bool strided,
                        int strided_pad) {
  harness::Case c;
  c.shape = shape;
  c.dtype = dtype;
  c.mask = mask;
  c.strided = strided;
  c.strided_pad = strided_pad;
  return c;
}

namespace {

// A float in a test name: whole numbers as they are, others in thousandths
// (0.3 -> "300m"), so the name stays alphanumeric.
std::string name_of(float x) {
  if (x == std::round(x)) return std::to_string(std::lround(x));
  return std::to_string(std::lround(x * 1000)) + "m";
}

// A window side in a test name: "open" for -1.
std::string side_name(int side) { return side < 0 ? "open" : std::to_string(side); }

}  // namespace

std::string case_name(const harness::Case& c) {
  const harness::Shape& s = c.shape;
  std::ostringstream out;
  out << "B" << s.batch << "_Nq" << s.seqlen_q << "_Nk" << s.seqlen_k << "_Hq" << s.heads_q
      << "_Hkv" << s.heads_kv << "_d" << s.head_dim
      << (s.head_dim_v > 0 && s.head_dim_v != s.head_dim ? "_dv" + std::to_string(s.head_dim_v)
                                                          : "")
      << "_" << to_string(c.dtype)
      << (c.mask == Mask::causal_top_left       ? "_causal_tl"
          : c.mask == Mask::causal_bottom_right ? "_causal_br"
                                                : "")
      << (c.strided ? "_strided" : "") << (c.strided && c.strided_pad % 8 == 0 ? "_aligned" : "");
  // The scale in thousandths keeps the name alphanumeric: 0.3 -> "scale300m",
  // -0.5 -> "scale_minus500m".
  if (c.scale)
    out << "_scale" << (*c.scale < 0 ? "_minus" : "") << std::lround(std::fabs(*c.scale) * 1000)
        << "m";
  if (c.input_std != 1.0f) out << "_std" << std::lround(c.input_std * 1000) << "m";
  if (c.window_left >= 0 || c.window_right >= 0)
    out << "_window_" << side_name(c.window_left) << "_" << side_name(c.window_right);
  if (c.softcap > 0.0f) out << "_softcap" << name_of(c.softcap);
  if (c.alibi) out << "_alibi";
  if (c.bias) {
    const harness::Case::Bias& b = *c.bias;
    out << "_bias_" << harness::bias_type_name(b.type);
    if (b.broadcast_batch || b.broadcast_heads) out << "_bcast_" << harness::bias_broadcast_name(b);
    if (b.key_major) out << "_key_major";
  }
  if (c.dropout.p > 0.0f) out << "_dropout" << std::lround(c.dropout.p * 1000) << "m";
  if (harness::is_packed(c)) {
    out << "_packed";
    for (const SequenceLengths& s : c.sequences) out << "_" << s.seqlen_q << "x" << s.seqlen_k;
    if (!c.checked_sequences) out << "_unchecked";
  }
  if (harness::is_cache(c)) {
    const harness::Case::Cache& kv = *c.cache;
    out << "_cache" << kv.capacity << (kv.page_size ? "_paged" + std::to_string(kv.page_size) : "")
        << "_add" << kv.appended << (kv.checked ? "" : "_unchecked");
    if (kv.key_splits) out << "_splits" << kv.key_splits;
    for (int n : kv.cached) out << "_" << n;
  }
  return out.str();
}

std::vector<BackendCase> with_backends(const std::vector<Backend>& backends,
                                       const std::vector<harness::Case>& cases) {
  std::vector<BackendCase> out;
  for (Backend b : backends)
    for (const harness::Case& c : cases)
      if (backend_supports(b, c.dtype, c.shape.head_dim, harness::value_head_dim(c.shape)))
        out.push_back({b, c});
  return out;
}

std::vector<harness::Case> tma_cases(const std::vector<harness::Case>& cases) {
  std::vector<harness::Case> out;
  for (harness::Case c : cases) {
    if (c.dtype == DType::f32 || c.shape.head_dim % 8 != 0) continue;
    c.strided_pad = 8;
    out.push_back(c);
  }
  return out;
}

std::vector<harness::Case> cases_taken_by(Backend backend,
                                          const std::vector<harness::Case>& cases) {
  std::vector<harness::Case> out;
  for (const harness::Case& c : backend == Backend::cuda_wgmma ? tma_cases(cases) : cases)
    if (backend_supports(backend, c.dtype, c.shape.head_dim)) out.push_back(c);
  return out;
}

bool tiles_values(Backend b) {
  return b == Backend::cuda_tiled || b == Backend::cuda_tf32x3 || b == Backend::cuda_f16x3 ||
         b == Backend::cuda_mma || b == Backend::cuda_wgmma;
}

std::vector<Backend> backward_backends() {
  std::vector<Backend> out;
  for (const BackendInfo& info : backends())
    if (info.has_backward()) out.push_back(info.backend);
  return out;
}

bool takes_backward(Backend backend, const harness::Case& c) {
  for (const BackendInfo& info : backends())
    if (info.backend == backend)
      return info.takes(c.dtype) &&
             info.takes_backward_head_dims(c.shape.head_dim, harness::value_head_dim(c.shape));
  return false;
}

std::string backend_case_name(const BackendCase& bc) {
  return std::string(to_string(bc.backend)) + "_" + case_name(bc.c);
}

void PrintTo(const BackendCase& bc, std::ostream* out) {
  *out << to_string(bc.backend) << " on " << harness::describe(bc.c);
}

void expect_accurate(const BackendCase& bc, Device device) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(bc.backend)) + " on " + harness::describe(bc.c) + ", " +
               replay_hint(seed));
  harness::Problem problem(bc.c, device, seed);
  forward(problem.params(bc.backend));
  const harness::Accuracy accuracy = problem.evaluate(bc.backend);
  EXPECT_EQ(accuracy.unwritten, 0) << "output or lse elements left unwritten (still NaN)";
  EXPECT_TRUE(accuracy.passed) << accuracy.summary();
}

void expect_gradients_accurate(const BackendCase& bc, Device device) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(bc.backend)) + " on " + harness::describe(bc.c) + ", " +
               replay_hint(seed));
  harness::GradProblem problem(bc.c, device, seed);
  problem.run(bc.backend);
  const harness::GradAccuracy acc = problem.evaluate(bc.backend);
  EXPECT_TRUE(acc.passed()) << acc.summary();
}

}  // namespace flashattn::test
