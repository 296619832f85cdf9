// Every argument rule of forward() (src/api/validate.cpp, src/api/forward.cpp):
// each broken argument gives flashattn::Error with the right Status and a
// message naming the argument and the rule, and leaves every buffer (out and lse
// above all) exactly as it was. Then the edge cases that must be accepted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace flashattn {
namespace {

using testing::HasSubstr;

constexpr float kSentinel = -12345.0f;
constexpr const char* kTensors[4] = {"q", "k", "v", "out"};
constexpr const char* kDims[4] = {"batch", "seqlen", "heads", "head_dim"};

// A valid f32 problem: q, out (2, 3, 4, 8); k, v (2, 5, 2, 8); lse (2, 4, 3).
// `arena` is spare memory for views placed next to or across each other;
// `bias` a (2, 4, 3, 5) bias for the problem (with_bias).
struct Buffers {
  std::vector<float> q = std::vector<float>(192, 0.5f), k = std::vector<float>(160, 0.25f),
                     v = std::vector<float>(160, 1.0f), out = std::vector<float>(192, kSentinel),
                     lse = std::vector<float>(24, kSentinel),
                     arena = std::vector<float>(400, kSentinel),
                     bias = std::vector<float>(120, 0.5f);
  bool operator==(const Buffers&) const = default;  // float ==: the sentinel is not NaN
};

Params valid_params(Buffers& b) {
  Params p;
  p.q = contiguous_view(b.q.data(), DType::f32, 2, 3, 4, 8);
  p.k = contiguous_view(b.k.data(), DType::f32, 2, 5, 2, 8);
  p.v = contiguous_view(b.v.data(), DType::f32, 2, 5, 2, 8);
  p.out = contiguous_view(b.out.data(), DType::f32, 2, 3, 4, 8);
  p.lse = b.lse.data();
  return p;
}

TensorView& view(Params& p, int tensor) {
  TensorView* views[4] = {&p.q, &p.k, &p.v, &p.out};
  return *views[tensor];
}

// p with the f32 bias of b, (batch, heads_q, seqlen_q, seqlen_k) contiguous.
void with_bias(Params& p, Buffers& b) {
  ScoreBias& bias = p.variants.bias;
  bias.data = b.bias.data();
  bias.type = BiasType::f32;
  const int64_t shape[4] = {2, 4, 3, 5}, stride[4] = {60, 15, 5, 1};
  std::copy(shape, shape + 4, bias.shape);
  std::copy(stride, stride + 4, bias.stride);
}

constexpr const char* kBiasDims[4] = {"batch", "heads", "seqlen_q", "seqlen_k"};

struct Rule {
  std::string name;
  std::function<void(Params&, Buffers&)> breaks;
  Status status;
  std::vector<std::string> message;  // substrings: the argument, then the rule
};

void PrintTo(const Rule& rule, std::ostream* out) { *out << rule.name; }

// The bias (flashattn::ScoreBias): each dimension of its shape wrong (batch and
// heads may be 1, seqlen_q and seqlen_k may not), each stride negative, an
// element type not in the enum, data not aligned to its element, a packed batch
// or a KV cache with it, a float bias with scale 0, and out or lse over it.
void add_bias_rules(std::vector<Rule>& r) {
  const Status invalid = Status::invalid_argument;
  for (int d = 0; d < 4; ++d) {
    const std::string dim = kBiasDims[d];
    r.push_back({"bias_" + dim + "_one_more",
                 [d](Params& p, Buffers& b) {
                   with_bias(p, b);
                   p.variants.bias.shape[d] += 1;
                 },
                 invalid,
                 {"variants.bias: " + dim + " is", d < 2 ? " or 1 (broadcast)" : "must be"}});
    r.push_back({"bias_" + dim + "_stride_negative",
                 [d](Params& p, Buffers& b) {
                   with_bias(p, b);
                   p.variants.bias.stride[d] = -1;
                 },
                 invalid,
                 {"variants.bias: " + dim + " stride is -1", "must be >= 0"}});
  }
  for (int d = 2; d < 4; ++d) {
    const std::string dim = kBiasDims[d];
    r.push_back({"bias_" + dim + "_one_is_no_broadcast",
                 [d](Params& p, Buffers& b) {
                   with_bias(p, b);
                   p.variants.bias.shape[d] = 1;
                 },
                 invalid,
                 {"variants.bias: " + dim + " is 1, must be " + (d == 2 ? "3" : "5")}});
  }
  r.push_back({"bias_type_not_an_enum_value",
               [](Params& p, Buffers& b) {
                 with_bias(p, b);
                 p.variants.bias.type = static_cast<BiasType>(9);
               },
               invalid,
               {"variants.bias", "is not one of f32, f16, bf16, boolean"}});
  r.push_back({"bias_f32_data_misaligned",
               [](Params& p, Buffers& b) {
                 with_bias(p, b);
                 p.variants.bias.data = reinterpret_cast<const char*>(b.bias.data()) + 2;
               },
               invalid,
               {"variants.bias: data is not aligned"}});
  r.push_back({"bias_with_a_packed_batch",
               [](Params& p, Buffers& b) {
                 static const int32_t cu_q[] = {0, 3, 6}, cu_k[] = {0, 5, 10};
                 p.q = contiguous_view(b.q.data(), DType::f32, 1, 6, 4, 8);
                 p.out = contiguous_view(b.out.data(), DType::f32, 1, 6, 4, 8);
                 p.k = contiguous_view(b.k.data(), DType::f32, 1, 10, 2, 8);
                 p.v = contiguous_view(b.v.data(), DType::f32, 1, 10, 2, 8);
                 p.sequences = {cu_q, cu_k, 2};
                 with_bias(p, b);
               },
               invalid,
               {"variants.bias: a variable-length batch takes no bias"}});
  r.push_back({"bias_with_a_kv_cache",
               [](Params& p, Buffers& b) {
                 static const int32_t seqlens[] = {3, 5};
                 p.kv_cache.seqlens = seqlens;
                 with_bias(p, b);
               },
               invalid,
               {"variants.bias: a KV-cache call takes no bias"}});
  for (float rate : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()})
    r.push_back({"dropout_p_" + std::string(rate < 0 ? "negative" : rate > 1 ? "above_one" : "nan"),
                 [rate](Params& p, Buffers&) { p.variants.dropout.p = rate; },
                 invalid,
                 {"variants.dropout.p: is", "must be in [0, 1]"}});
  r.push_back({"dropout_with_a_kv_cache",
               [](Params& p, Buffers&) {
                 static const int32_t seqlens[] = {3, 5};
                 p.kv_cache.seqlens = seqlens;
                 p.variants.dropout.p = 0.1f;
               },
               invalid,
               {"variants.dropout: a KV-cache call takes no dropout"}});
  const std::pair<const char*, BiasType> types[] = {{"f32", BiasType::f32},
                                                    {"f16", BiasType::f16},
                                                    {"bf16", BiasType::bf16},
                                                    {"bool", BiasType::boolean}};
  for (const auto& [label, type] : types)
    r.push_back({std::string("scale_zero_with_a_bias_") + label,
                 [type](Params& p, Buffers& b) {
                   with_bias(p, b);
                   p.variants.bias.type = type;
                   p.scale = 0.0f;
                 },
                 invalid,
                 {"scale: is 0", "a bias or mask"}});
  r.push_back({"out_over_bias",
               [](Params& p, Buffers& b) {
                 with_bias(p, b);
                 p.variants.bias.data = b.out.data() + 72;  // out's last 120 elements
               },
               invalid,
               {"out: memory overlaps variants.bias"}});
  r.push_back({"lse_inside_bias",
               [](Params& p, Buffers& b) {
                 with_bias(p, b);
                 p.lse = b.bias.data() + 119;  // the bias's last element
               },
               invalid,
               {"lse: memory overlaps variants.bias"}});
}

std::vector<Rule> rules() {
  const Status invalid = Status::invalid_argument;
  std::vector<Rule> r;
  for (int t = 0; t < 4; ++t) {
    const std::string name = kTensors[t];
    r.push_back({name + "_data_null",
                 [t](Params& p, Buffers&) { view(p, t).data = nullptr; },
                 invalid,
                 {name + ": data pointer is null", "only a tensor with no elements"}});
    // batch and seqlen may be 0 (EmptyProblems below); heads and head_dim may not.
    for (int d = 2; d < 4; ++d) {
      const std::string dim = kDims[d];
      r.push_back({name + "_" + dim + "_zero",
                   [t, d](Params& p, Buffers&) { view(p, t).shape[d] = 0; },
                   invalid,
                   {name + ": " + dim + " is 0", "must be >= 1"}});
    }
    for (int d = 0; d < 2; ++d) {
      const std::string dim = kDims[d];
      r.push_back({name + "_" + dim + "_negative",
                   [t, d](Params& p, Buffers&) { view(p, t).shape[d] = -3; },
                   invalid,
                   {name + ": " + dim + " is -3", "must be >= 0"}});
    }
    for (int d = 0; d < 3; ++d) {
      const std::string dim = kDims[d];
      r.push_back({name + "_" + dim + "_stride_negative",
                   [t, d](Params& p, Buffers&) { view(p, t).stride[d] = -1; },
                   invalid,
                   {name + ": " + dim + " stride is -1", "must be >= 0"}});
    }
    r.push_back({name + "_head_dim_stride_2",
                 [t](Params& p, Buffers&) { view(p, t).stride[3] = 2; },
                 invalid,
                 {name + ": head_dim stride is 2", "must be 1"}});
  }
  r.push_back({"q_seqlen_above_int_max",
               [](Params& p, Buffers&) { p.q.shape[1] = int64_t(INT_MAX) + 1; },
               invalid,
               {"q: seqlen is 2147483648", "must be <= 2147483647"}});
  r.push_back({"q_head_dim_stride_0",
               [](Params& p, Buffers&) { p.q.stride[3] = 0; },
               invalid,
               {"q: head_dim stride is 0", "must be 1"}});
  r.push_back({"q_head_dim_stride_negative",
               [](Params& p, Buffers&) { p.q.stride[3] = -1; },
               invalid,
               {"q: head_dim stride is -1", "must be >= 0"}});
  r.push_back({"q_dtype_not_an_enum_value",
               [](Params& p, Buffers&) { p.q.dtype = static_cast<DType>(7); },
               invalid,
               {"q: dtype is not one of f32, f16, bf16"}});
  r.push_back({"k_device_kind_not_an_enum_value",
               [](Params& p, Buffers&) { p.k.device.kind = static_cast<DeviceKind>(5); },
               invalid,
               {"k: device kind is not cpu or cuda"}});
  for (int t = 1; t < 4; ++t) {
    const std::string name = kTensors[t];
    r.push_back({name + "_dtype_differs",
                 [t](Params& p, Buffers&) { view(p, t).dtype = DType::f16; },
                 invalid,
                 {name + ": dtype f16 differs from q's dtype f32"}});
    r.push_back({name + "_device_differs",
                 [t](Params& p, Buffers&) {
                   view(p, t).device = {DeviceKind::cuda, 0};
                 },
                 invalid,
                 {name + ": device differs from q's device"}});
  }
  // Shapes that disagree: k with q (batch, head_dim), v with k, out with q and v.
  r.push_back({"k_batch_differs_from_q",
               [](Params& p, Buffers&) { p.k.shape[0] = 3; },
               invalid,
               {"k: batch is 3, must equal q's batch (2)"}});
  r.push_back({"k_head_dim_differs_from_q",
               [](Params& p, Buffers&) { p.k.shape[3] = 9; },
               invalid,
               {"k: head_dim is 9, must equal q's head_dim (8)"}});
  // v's head_dim may differ from k's (head_dim_v); out's must then be v's.
  r.push_back({"v_head_dim_differs_from_out",
               [](Params& p, Buffers&) { p.v.shape[3] = 9; },
               invalid,
               {"out: head_dim is 8, must equal v's head_dim (9)"}});
  r.push_back({"out_head_dim_differs_from_v",
               [](Params& p, Buffers&) { p.out.shape[3] = 9; },
               invalid,
               {"out: head_dim is 9, must equal v's head_dim (8)"}});
  for (int d = 0; d < 3; ++d) {
    const std::string dim = kDims[d];
    r.push_back({"v_" + dim + "_differs_from_k",
                 [d](Params& p, Buffers&) { p.v.shape[d] += 1; },
                 invalid,
                 {"v: " + dim + " is", "must equal k's " + dim}});
    r.push_back({"out_" + dim + "_differs_from_q",
                 [d](Params& p, Buffers&) { p.out.shape[d] += 1; },
                 invalid,
                 {"out: " + dim + " is", "must equal q's " + dim}});
  }
  r.push_back({"heads_q_not_a_multiple_of_heads_kv",
               [](Params& p, Buffers&) { p.k.shape[2] = p.v.shape[2] = 3; },
               invalid,
               {"q: heads (4) must be a multiple of k's heads (3)"}});
  // Any finite scale is valid (AnyFiniteScale below); only non-finite ones are not.
  const std::pair<const char*, float> bad_scales[] = {
      {"nan", std::numeric_limits<float>::quiet_NaN()},
      {"inf", std::numeric_limits<float>::infinity()},
      {"minus_inf", -std::numeric_limits<float>::infinity()}};
  for (const auto& [label, scale] : bad_scales)
    r.push_back({std::string("scale_") + label,
                 [scale](Params& p, Buffers&) { p.scale = scale; },
                 invalid,
                 {"scale: is", "must be finite"}});
  // An output whose rows, heads or batches land on each other: every element of
  // out must be its own memory (inputs may repeat: KeysAndValuesBroadcastOverBatch).
  r.push_back({"out_seqlen_stride_zero",
               [](Params& p, Buffers&) { p.out.stride[1] = 0; },
               invalid,
               {"out: seqlen stride is 0", "overlap"}});
  r.push_back({"out_batch_stride_zero",
               [](Params& p, Buffers&) { p.out.stride[0] = 0; },
               invalid,
               {"out: batch stride is 0", "overlap"}});
  r.push_back({"out_heads_overlap_half_a_head",
               [](Params& p, Buffers&) { p.out.stride[2] = 4; },
               invalid,
               {"out: heads stride is 4", "overlap"}});
  r.push_back({"out_rows_overlap_heads",
               [](Params& p, Buffers&) {
                 p.out.stride[1] = 8;   // row i + 1 starts where head 1 of row i does
                 p.out.stride[2] = 16;  // and heads step over only two rows of three
               },
               invalid,
               {"out: heads stride is 16", "overlap"}});
  // Overlaps: out with any input (whole or by one element), lse with anything.
  r.push_back({"out_is_q",
               [](Params& p, Buffers& b) { p.out.data = b.q.data(); },
               invalid,
               {"out: memory overlaps q"}});
  r.push_back({"out_is_v",
               [](Params& p, Buffers& b) { p.out.data = b.v.data(); },
               invalid,
               {"out: memory overlaps v"}});
  r.push_back({"out_shares_last_element_of_q",
               [](Params& p, Buffers& b) {
                 p.q.data = b.arena.data();
                 p.out.data = b.arena.data() + 191;
               },
               invalid,
               {"out: memory overlaps q"}});
  r.push_back({"out_shares_last_element_of_k",
               [](Params& p, Buffers& b) {
                 p.k.data = b.arena.data();
                 p.out.data = b.arena.data() + 159;
               },
               invalid,
               {"out: memory overlaps k"}});
  for (int t = 0; t < 4; ++t) {
    const std::string name = kTensors[t];
    r.push_back({"lse_overlaps_" + name,
                 [t](Params& p, Buffers&) { p.lse = static_cast<float*>(view(p, t).data) + 1; },
                 invalid,
                 {"lse: memory overlaps " + name}});
  }
  r.push_back({"mask_not_an_enum_value",
               [](Params& p, Buffers&) { p.mask = static_cast<Mask>(3); },
               invalid,
               {"mask: is not one of none, causal_top_left, causal_bottom_right"}});
  r.push_back({"backend_not_an_enum_value",
               [](Params& p, Buffers&) { p.backend = static_cast<Backend>(17); },
               invalid,
               {"backend: is not a known backend"}});
  // The variants: window sides of -1 (open) or more, a finite softcap >= 0,
  // and a nonzero scale where softcap or ALiBi divide by it.
  r.push_back({"window_left_minus_2",
               [](Params& p, Buffers&) { p.variants.window_left = -2; },
               invalid,
               {"variants.window_left: is -2", "must be >= -1"}});
  r.push_back({"window_right_minus_5",
               [](Params& p, Buffers&) { p.variants.window_right = -5; },
               invalid,
               {"variants.window_right: is -5", "must be >= -1"}});
  const std::pair<const char*, float> bad_softcaps[] = {
      {"minus_1", -1.0f},
      {"nan", std::numeric_limits<float>::quiet_NaN()},
      {"inf", std::numeric_limits<float>::infinity()}};
  for (const auto& [label, softcap] : bad_softcaps)
    r.push_back({std::string("softcap_") + label,
                 [softcap](Params& p, Buffers&) { p.variants.softcap = softcap; },
                 invalid,
                 {"variants.softcap: is", "must be finite and >= 0"}});
  r.push_back({"scale_zero_with_softcap",
               [](Params& p, Buffers&) {
                 p.scale = 0.0f;
                 p.variants.softcap = 5.0f;
               },
               invalid,
               {"scale: is 0", "softcap, ALiBi"}});
  r.push_back({"scale_zero_with_alibi",
               [](Params& p, Buffers& b) {
                 p.scale = 0.0f;
                 p.variants.alibi_slopes = b.arena.data();
               },
               invalid,
               {"scale: is 0", "softcap, ALiBi"}});
  add_bias_rules(r);
  for (Backend b : {Backend::cuda_naive, Backend::cuda_tiled, Backend::cuda_tf32x3,
                    Backend::cuda_f16x3, Backend::cuda_mma, Backend::cuda_wgmma}) {
    const std::string name(to_string(b));
    r.push_back({name + "_on_cpu_tensors",
                 [b](Params& p, Buffers&) { p.backend = b; },
                 Status::unsupported,
                 {"backend: " + name + " runs on cuda tensors, but q is on cpu"}});
  }
  return r;
}

class Validation : public testing::TestWithParam<Rule> {};

TEST_P(Validation, RejectsAndWritesNothing) {
  const Rule& rule = GetParam();
  Buffers buffers;
  Params params = valid_params(buffers);
  rule.breaks(params, buffers);
  const Buffers before = buffers;
  for (bool select_only : {false, true}) {
    SCOPED_TRACE(select_only ? "select_backend" : "forward");
    try {
      if (select_only)
        select_backend(params);
      else
        forward(params);
      ADD_FAILURE() << "the call was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), rule.status) << e.what();
      for (const std::string& part : rule.message) EXPECT_THAT(e.what(), HasSubstr(part));
    }
  }
  EXPECT_TRUE(buffers == before) << "a rejected call wrote to q, k, v, out, lse or nearby memory";
}

INSTANTIATE_TEST_SUITE_P(EveryRule, Validation, testing::ValuesIn(rules()),
                         [](const testing::TestParamInfo<Rule>& info) { return info.param.name; });

// Runs params and expects it to be accepted and to write every out element.
void expect_accepted(const Params& p, const std::vector<float>& out) {
  EXPECT_NO_THROW(forward(p));
  for (float x : out) ASSERT_NE(x, kSentinel) << "an out element was not written";
}

TEST(ValidationAccepts, TheBaselineProblem) {
  Buffers b;
  expect_accepted(valid_params(b), b.out);
  for (float x : b.lse) EXPECT_NE(x, kSentinel);
}

TEST(ValidationAccepts, DefaultParamsAreRejectedNotCrashed) {
  EXPECT_THROW(forward(Params{}), Error);
  try {
    forward(Params{});
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("q: heads is 0, must be >= 1"));
  }
}

TEST(ValidationAccepts, AnyHeadDimStrideWhenHeadDimIsOne) {
  std::vector<float> q(6, 1.0f), k(6, 1.0f), v(6, 2.0f), out(6, kSentinel);
  Params p;
  p.q = contiguous_view(q.data(), DType::f32, 1, 3, 2, 1);
  p.k = contiguous_view(k.data(), DType::f32, 1, 3, 2, 1);
  p.v = contiguous_view(v.data(), DType::f32, 1, 3, 2, 1);
  p.out = contiguous_view(out.data(), DType::f32, 1, 3, 2, 1);
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out}) t->stride[3] = 7;
  expect_accepted(p, out);
}

TEST(ValidationAccepts, KeysAndValuesBroadcastOverBatch) {
  // Batch stride 0: both batches read the same k and v, so their outputs match.
  Buffers b;
  Params p = valid_params(b);
  p.k.stride[0] = p.v.stride[0] = 0;
  expect_accepted(p, b.out);
  for (int e = 0; e < 96; ++e) EXPECT_EQ(b.out[e], b.out[96 + e]);
}

TEST(ValidationAccepts, QueriesAndKeysSharingMemory) {
  // Self-attention on one buffer: inputs may alias each other, only out may not.
  Buffers b;
  Params p = valid_params(b);
  p.k = contiguous_view(b.q.data(), DType::f32, 2, 3, 4, 8);
  p.v = p.k;
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, OutRightAfterQ) {
  // Byte ranges are half-open: out starting one past q's last element is fine.
  Buffers b;
  Params p = valid_params(b);
  p.q.data = b.arena.data();
  p.out.data = b.arena.data() + 192;
  EXPECT_NO_THROW(forward(p));
}

TEST(ValidationAccepts, NoLse) {
  Buffers b;
  Params p = valid_params(b);
  p.lse = nullptr;
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, TinyPositiveScale) {
  Buffers b;
  Params p = valid_params(b);
  p.scale = std::numeric_limits<float>::denorm_min();
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, EveryVariantTogether) {
  // Row i sees key i + 2 alone (no mask: off = seqlen_k - seqlen_q = 2).
  Buffers b;
  Params p = valid_params(b);
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  p.variants.window_left = 0;
  p.variants.window_right = 0;
  p.variants.softcap = 5.0f;
  p.variants.alibi_slopes = slopes.data();
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, ZeroScaleWithAWindowAlone) {
  // Only softcap, ALiBi and a bias divide by the scale.
  Buffers b;
  Params p = valid_params(b);
  p.scale = 0.0f;
  p.variants.window_left = 1;
  p.variants.window_right = 3;
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, BiasBroadcastDimensionsIgnoreTheirStrides) {
  // Size 1 on batch and heads: their strides are never used, however far they reach.
  Buffers b;
  Params p = valid_params(b);
  with_bias(p, b);
  ScoreBias& bias = p.variants.bias;
  bias.shape[0] = bias.shape[1] = 1;
  bias.stride[0] = bias.stride[1] = int64_t(1) << 40;
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, BiasOfAnotherFloatTypeThanQ) {
  // A bf16 bias on f32 tensors; a stride-0 key dimension reads one element per row.
  Buffers b;
  Params p = valid_params(b);
  with_bias(p, b);
  p.variants.bias.type = BiasType::bf16;
  p.variants.bias.stride[3] = 0;
  expect_accepted(p, b.out);
}

TEST(ValidationAccepts, NullBiasDataIsNoBias) {
  // ScoreBias::data null means no bias, whatever its other fields say.
  Buffers b;
  Params p = valid_params(b);
  p.variants.bias.type = static_cast<BiasType>(9);
  p.variants.bias.shape[0] = -4;
  p.variants.bias.stride[2] = -1;
  expect_accepted(p, b.out);
}

TEST(ValidationBackward, RejectsGradientsOverTheBias) {
  Buffers b;
  Params p = valid_params(b);
  with_bias(p, b);
  forward(p);
  std::vector<float> dout(192, 1.0f), dk(160, kSentinel), dv(160, kSentinel);
  BackwardParams g;
  g.q = p.q;
  g.k = p.k;
  g.v = p.v;
  g.out = p.out;
  g.lse = p.lse;
  g.variants = p.variants;
  g.dout = contiguous_view(dout.data(), DType::f32, 2, 3, 4, 8);
  g.dq = contiguous_view(b.arena.data(), DType::f32, 2, 3, 4, 8);
  g.dk = contiguous_view(dk.data(), DType::f32, 2, 5, 2, 8);
  g.dv = contiguous_view(dv.data(), DType::f32, 2, 5, 2, 8);
  g.variants.bias.data = b.arena.data() + 100;  // inside dq
  const std::vector<float> arena = b.arena;
  try {
    backward(g);
    ADD_FAILURE() << "the call was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("dq: memory overlaps variants.bias"));
  }
  EXPECT_EQ(b.arena, arena);
  for (float x : dk) EXPECT_EQ(x, kSentinel);
  for (float x : dv) EXPECT_EQ(x, kSentinel);
}

TEST(ValidationAccepts, CpuDeviceIndexIsIgnored) {
  // flashattn.hpp documents Device::index as "CUDA ordinal; ignored on the CPU".
  Buffers b;
  Params p = valid_params(b);
  p.k.device.index = 3;
  expect_accepted(p, b.out);
}

}  // namespace
}  // namespace flashattn
