// The C ABI (flashattn.h): its helpers fill the structs as documented, a valid
// call matches the C++ API bit for bit, and every failure returns the right code
// with flashattn_last_error() naming the argument, writing nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"
#include "seed.h"

namespace flashattn::test {
namespace {

using testing::HasSubstr;

constexpr float kSentinel = 777.0f;

// q, out (2, 5, 4, 8); k, v (2, 7, 2, 8) in `dtype`, random inputs; out and lse
// hold a sentinel. Stored as float slots wide enough for any dtype.
struct Tensors {
  DType dtype;
  // k's view takes 224 elements; its buffer has q's 320, so that out pointed at
  // k (the out_is_k case, out in q's shape) lies wholly in k's memory and not
  // also in whatever the heap put after it (q, at times: "out: memory overlaps q").
  std::vector<float> q, k, v, out, lse;
  explicit Tensors(DType d, uint64_t seed)
      : dtype(d), q(320), k(320), v(224), out(320, kSentinel), lse(40, kSentinel) {
    uint64_t state = seed;
    auto next = [&] {  // splitmix64 → uniform in [-1, 1)
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return float(double(z ^ (z >> 31)) / 0x1p63 - 1.0);
    };
    for (std::vector<float>* t : {&q, &k, &v})
      for (size_t e = 0; e < t->size(); ++e) store_float(t->data(), d, int64_t(e), next());
  }

  flashattn_params c_params() {
    const auto c_dtype = static_cast<flashattn_dtype>(dtype);
    flashattn_params p = flashattn_default_params(
        flashattn_contiguous(q.data(), c_dtype, 2, 5, 4, 8, FLASHATTN_CPU, 0),
        flashattn_contiguous(k.data(), c_dtype, 2, 7, 2, 8, FLASHATTN_CPU, 0),
        flashattn_contiguous(v.data(), c_dtype, 2, 7, 2, 8, FLASHATTN_CPU, 0),
        flashattn_contiguous(out.data(), c_dtype, 2, 5, 4, 8, FLASHATTN_CPU, 0));
    p.lse = lse.data();
    return p;
  }
  Params cpp_params() {
    Params p;
    p.q = contiguous_view(q.data(), dtype, 2, 5, 4, 8);
    p.k = contiguous_view(k.data(), dtype, 2, 7, 2, 8);
    p.v = contiguous_view(v.data(), dtype, 2, 7, 2, 8);
    p.out = contiguous_view(out.data(), dtype, 2, 5, 4, 8);
    p.lse = lse.data();
    return p;
  }
  void expect_untouched() const {
    for (float x : out) ASSERT_EQ(x, kSentinel) << "out written by a failed call";
    for (float x : lse) ASSERT_EQ(x, kSentinel) << "lse written by a failed call";
  }
};

TEST(CApi, EnumValuesMatchTheCppApi) {
  EXPECT_EQ(int(FLASHATTN_ERR_INVALID_ARGUMENT), int(Status::invalid_argument));
  EXPECT_EQ(int(FLASHATTN_ERR_UNSUPPORTED), int(Status::unsupported));
  EXPECT_EQ(int(FLASHATTN_ERR_CUDA), int(Status::cuda_error));
  EXPECT_EQ(int(FLASHATTN_ERR_INTERNAL), int(Status::internal));
  EXPECT_EQ(int(FLASHATTN_BF16), int(DType::bf16));
  EXPECT_EQ(int(FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT), int(Mask::causal_bottom_right));
  EXPECT_EQ(int(FLASHATTN_BACKEND_CUDA_TILED), int(Backend::cuda_tiled));
  EXPECT_EQ(int(FLASHATTN_BACKEND_CUDA_TF32X3), int(Backend::cuda_tf32x3));
  EXPECT_EQ(int(FLASHATTN_BACKEND_CUDA_MMA), int(Backend::cuda_mma));
  EXPECT_EQ(int(FLASHATTN_BACKEND_CUDA_WGMMA), int(Backend::cuda_wgmma));
  EXPECT_EQ(int(FLASHATTN_BACKEND_CUDA_F16X3), int(Backend::cuda_f16x3));
  EXPECT_EQ(int(FLASHATTN_BIAS_F32), int(BiasType::f32));
  EXPECT_EQ(int(FLASHATTN_BIAS_F16), int(BiasType::f16));
  EXPECT_EQ(int(FLASHATTN_BIAS_BF16), int(BiasType::bf16));
  EXPECT_EQ(int(FLASHATTN_BIAS_BOOL), int(BiasType::boolean));
}

TEST(CApi, ContiguousFillsShapeStridesAndDevice) {
  float x;
  const flashattn_tensor t =
      flashattn_contiguous(&x, FLASHATTN_BF16, 2, 3, 5, 7, FLASHATTN_CUDA, 1);
  EXPECT_EQ(t.data, &x);
  EXPECT_EQ(t.dtype, FLASHATTN_BF16);
  EXPECT_EQ(t.device, FLASHATTN_CUDA);
  EXPECT_EQ(t.device_index, 1);
  const int64_t shape[4] = {2, 3, 5, 7}, strides[4] = {105, 35, 7, 1};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(t.shape[d], shape[d]);
    EXPECT_EQ(t.strides[d], strides[d]);
  }
}

TEST(CApi, DefaultParamsSetEveryOptionToItsDefault) {
  Tensors t(DType::f32, 1);
  const flashattn_params p = t.c_params();
  EXPECT_EQ(p.q.data, t.q.data());
  EXPECT_EQ(p.out.data, t.out.data());
  EXPECT_EQ(p.has_scale, 0);
  EXPECT_EQ(p.mask, FLASHATTN_MASK_NONE);
  EXPECT_EQ(p.backend, FLASHATTN_BACKEND_AUTO);
  EXPECT_EQ(p.stream, nullptr);
  const flashattn_params bare = flashattn_default_params(p.q, p.k, p.v, p.out);
  EXPECT_EQ(bare.lse, nullptr);
}

class CApiForward : public testing::TestWithParam<DType> {};

TEST_P(CApiForward, MatchesCppApiBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  for (auto [mask, scale] :
       {std::pair{Mask::none, 0.0f}, std::pair{Mask::causal_bottom_right, 0.4f},
        std::pair{Mask::causal_top_left, 0.0f}}) {
    SCOPED_TRACE("mask " + std::to_string(int(mask)) + ", scale " + std::to_string(scale));
    Tensors c(GetParam(), seed), cpp(GetParam(), seed);
    flashattn_params cp = c.c_params();
    cp.mask = int32_t(mask);
    cp.has_scale = scale > 0;
    cp.scale = scale;
    ASSERT_EQ(flashattn_forward(&cp), FLASHATTN_OK) << flashattn_last_error();
    EXPECT_STREQ(flashattn_last_error(), "");

    Params pp = cpp.cpp_params();
    pp.mask = mask;
    if (scale > 0) pp.scale = scale;
    forward(pp);
    EXPECT_EQ(std::memcmp(c.out.data(), cpp.out.data(), c.out.size() * sizeof(float)), 0)
        << "out differs from the C++ API's";
    EXPECT_EQ(std::memcmp(c.lse.data(), cpp.lse.data(), c.lse.size() * sizeof(float)), 0)
        << "lse differs from the C++ API's";
    EXPECT_NE(c.lse[0], kSentinel);
  }
}

// ALiBi slopes for the 4 query heads of Tensors.
constexpr float kSlopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};

// A window, a softcap and ALiBi in the C struct and in the C++ one.
flashattn_variants c_variants() {
  flashattn_variants v = flashattn_variants_defaults();
  v.window_left = 2;
  v.window_right = 1;
  v.softcap = 3.0f;
  v.alibi_slopes = kSlopes;
  return v;
}
Variants cpp_variants() {
  Variants v;
  v.window_left = 2;
  v.window_right = 1;
  v.softcap = 3.0f;
  v.alibi_slopes = kSlopes;
  return v;
}

// flashattn_forward_variants with NULL is flashattn_forward; with variants it
// gives the C++ API's bytes, under each mask.
TEST_P(CApiForward, VariantsMatchCppApiBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  Tensors plain(GetParam(), seed), none(GetParam(), seed);
  flashattn_params pp = plain.c_params(), np = none.c_params();
  ASSERT_EQ(flashattn_forward(&pp), FLASHATTN_OK) << flashattn_last_error();
  ASSERT_EQ(flashattn_forward_variants(&np, nullptr), FLASHATTN_OK) << flashattn_last_error();
  EXPECT_EQ(std::memcmp(none.out.data(), plain.out.data(), none.out.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(none.lse.data(), plain.lse.data(), none.lse.size() * sizeof(float)), 0);

  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    SCOPED_TRACE("mask " + std::to_string(int(mask)));
    Tensors c(GetParam(), seed), cpp(GetParam(), seed);
    flashattn_params cp = c.c_params();
    cp.mask = int32_t(mask);
    const flashattn_variants v = c_variants();
    ASSERT_EQ(flashattn_forward_variants(&cp, &v), FLASHATTN_OK) << flashattn_last_error();
    Params p = cpp.cpp_params();
    p.mask = mask;
    p.variants = cpp_variants();
    forward(p);
    EXPECT_EQ(std::memcmp(c.out.data(), cpp.out.data(), c.out.size() * sizeof(float)), 0)
        << "out differs from the C++ API's";
    EXPECT_EQ(std::memcmp(c.lse.data(), cpp.lse.data(), c.lse.size() * sizeof(float)), 0)
        << "lse differs from the C++ API's";
    EXPECT_NE(std::memcmp(c.out.data(), plain.out.data(), c.out.size() * sizeof(float)), 0)
        << "the variants changed nothing";
  }
}

// A bias of each type for Tensors' problem, (2, 4, 5, 7), contiguous, or of
// size 1 over the heads (whose stride is then never read): values in [-2, 2)
// with every 5th element −inf (float), or 2 in 3 kept (boolean; kept bytes of
// any nonzero value).
struct BiasTensor {
  static constexpr int64_t kElems = 2 * 4 * 5 * 7;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kElems * 4);
  BiasType type;
  bool over_heads;

  BiasTensor(BiasType t, bool broadcast_heads, uint64_t seed)
      : type(t), over_heads(broadcast_heads) {
    uint64_t state = seed;
    for (int64_t e = 0; e < kElems; ++e) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float x = float((state >> 40) & 0xFFFF) / 16384.0f - 2.0f;
      if (t == BiasType::boolean) {
        bytes[size_t(e)] = e % 3 == 0 ? 0 : uint8_t(1 + (state >> 56) % 255);
        continue;
      }
      const DType d = t == BiasType::f32   ? DType::f32
                      : t == BiasType::f16 ? DType::f16
                                           : DType::bf16;
      store_float(bytes.data(), d, e, e % 5 == 0 ? -INFINITY : x);
    }
  }
  int64_t shape(int d) const {
    const int64_t full[4] = {2, 4, 5, 7};
    return d == 1 && over_heads ? 1 : full[d];
  }
  int64_t stride(int d) const {
    const int64_t contiguous[4] = {140, 35, 7, 1};
    return d == 1 && over_heads ? 999999 : contiguous[d];
  }
  void set(flashattn_variants& v) const {
    v.bias = bytes.data();
    v.bias_type = int32_t(type);
    for (int d = 0; d < 4; ++d) {
      v.bias_shape[d] = shape(d);
      v.bias_strides[d] = stride(d);
    }
  }
  ScoreBias cpp() const {
    ScoreBias b;
    b.data = bytes.data();
    b.type = type;
    for (int d = 0; d < 4; ++d) {
      b.shape[d] = shape(d);
      b.stride[d] = stride(d);
    }
    return b;
  }
};

// flashattn_forward_with and a second-generation flashattn_variants carrying a
// bias or mask of each type, alone and with every other variant: the C++ API's
// bytes, under each mask.
TEST_P(CApiForward, BiasMatchesCppApiBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  Tensors plain(GetParam(), seed);
  flashattn_params pp = plain.c_params();
  ASSERT_EQ(flashattn_forward(&pp), FLASHATTN_OK) << flashattn_last_error();
  for (BiasType type : {BiasType::f32, BiasType::f16, BiasType::bf16, BiasType::boolean})
    for (bool others : {false, true})
      for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
        SCOPED_TRACE("bias type " + std::to_string(int(type)) + (others ? ", with variants" : "") +
                     ", mask " + std::to_string(int(mask)));
        const BiasTensor bias(type, others, seed);
        Tensors c(GetParam(), seed), cpp(GetParam(), seed);
        flashattn_params cp = c.c_params();
        cp.mask = int32_t(mask);
        flashattn_variants v = others ? c_variants() : flashattn_variants_defaults();
        bias.set(v);
        flashattn_forward_options options = flashattn_forward_options_defaults();
        options.variants = &v;
        ASSERT_EQ(flashattn_forward_with(&cp, &options), FLASHATTN_OK) << flashattn_last_error();
        Params p = cpp.cpp_params();
        p.mask = mask;
        if (others) p.variants = cpp_variants();
        p.variants.bias = bias.cpp();
        forward(p);
        EXPECT_EQ(std::memcmp(c.out.data(), cpp.out.data(), c.out.size() * sizeof(float)), 0)
            << "out differs from the C++ API's";
        EXPECT_EQ(std::memcmp(c.lse.data(), cpp.lse.data(), c.lse.size() * sizeof(float)), 0)
            << "lse differs from the C++ API's";
        EXPECT_NE(std::memcmp(c.out.data(), plain.out.data(), c.out.size() * sizeof(float)), 0)
            << "the bias changed nothing";
      }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CApiForward, testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(to_string(info.param));
                         });

struct CError {
  std::string name;
  void (*breaks)(flashattn_params&);
  flashattn_status code;
  std::vector<std::string> message;
};

void PrintTo(const CError& e, std::ostream* out) { *out << e.name; }

const std::vector<CError> kErrors = {
    {"q_dtype_out_of_range",
     [](flashattn_params& p) { p.q.dtype = 3; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"q: dtype 3 is not one of"}},
    {"k_device_out_of_range",
     [](flashattn_params& p) { p.k.device = 2; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"k: device 2 is not FLASHATTN_CPU or FLASHATTN_CUDA"}},
    {"mask_out_of_range",
     [](flashattn_params& p) { p.mask = 3; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"mask: 3 is not a flashattn_mask value"}},
    {"backend_out_of_range",
     [](flashattn_params& p) { p.backend = -1; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"backend: -1 is not a flashattn_backend value"}},
    {"v_data_null",
     [](flashattn_params& p) { p.v.data = nullptr; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"v: data pointer is null"}},
    {"out_head_dim_zero",
     [](flashattn_params& p) { p.out.shape[3] = 0; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"out: head_dim is 0"}},
    {"k_head_dim_stride_3",
     [](flashattn_params& p) { p.k.strides[3] = 3; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"k: head_dim stride is 3"}},
    {"out_is_k",
     [](flashattn_params& p) { p.out.data = p.k.data; },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"out: memory overlaps k"}},
    {"scale_inf",
     [](flashattn_params& p) {
       p.has_scale = 1;
       p.scale = INFINITY;
     },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"scale: is inf", "must be finite"}},
    {"scale_nan",
     [](flashattn_params& p) {
       p.has_scale = 1;
       p.scale = NAN;
     },
     FLASHATTN_ERR_INVALID_ARGUMENT,
     {"scale: is nan"}},
    {"cuda_tiled_on_cpu_tensors",
     [](flashattn_params& p) { p.backend = FLASHATTN_BACKEND_CUDA_TILED; },
     FLASHATTN_ERR_UNSUPPORTED,
     {"backend: cuda_tiled runs on cuda tensors"}},
};

class CApiError : public testing::TestWithParam<CError> {};

TEST_P(CApiError, ReturnsCodeAndNamesArgument) {
  const CError& error = GetParam();
  Tensors t(DType::f32, 7);
  flashattn_params p = t.c_params();
  error.breaks(p);
  EXPECT_EQ(flashattn_forward(&p), error.code);
  for (const std::string& part : error.message)
    EXPECT_THAT(flashattn_last_error(), HasSubstr(part));
  t.expect_untouched();
}

INSTANTIATE_TEST_SUITE_P(EachPath, CApiError, testing::ValuesIn(kErrors),
                         [](const testing::TestParamInfo<CError>& info) {
                           return info.param.name;
                         });

TEST(CApiVariants, DefaultsTurnEveryVariantOff) {
  const flashattn_variants v = flashattn_variants_defaults();
  EXPECT_EQ(v.struct_size, sizeof(flashattn_variants));
  EXPECT_EQ(v.window_left, -1);
  EXPECT_EQ(v.window_right, -1);
  EXPECT_EQ(v.softcap, 0.0f);
  EXPECT_EQ(v.alibi_slopes, nullptr);
  EXPECT_EQ(v.bias, nullptr);
}

// A struct_size short of the first generation's fields (up to alibi_slopes)
// is refused, naming it; so is a rule a variant breaks. Nothing is written.
TEST(CApiVariants, RejectedVariantsNameTheirField) {
  const struct {
    void (*breaks)(flashattn_variants&);
    const char* message;
  } errors[] = {
      {[](flashattn_variants& v) { v.struct_size = 4; }, "variants: struct_size is 4"},
      {[](flashattn_variants& v) { v.struct_size = offsetof(flashattn_variants, alibi_slopes); },
       "variants: struct_size is"},
      {[](flashattn_variants& v) { v.window_left = -2; }, "variants.window_left: is -2"},
      {[](flashattn_variants& v) { v.softcap = -1.0f; }, "variants.softcap: is -1"},
      {[](flashattn_variants& v) {
         static const BiasTensor bias(BiasType::f32, false, 1);
         bias.set(v);
         v.bias_type = 4;
       },
       "variants.bias_type: 4 is not a flashattn_bias_type value"},
      {[](flashattn_variants& v) {
         static const BiasTensor bias(BiasType::f32, false, 1);
         bias.set(v);
         v.bias_type = -1;
       },
       "variants.bias_type: -1 is not a flashattn_bias_type value"},
      {[](flashattn_variants& v) {
         static const BiasTensor bias(BiasType::boolean, false, 1);
         bias.set(v);
         v.bias_shape[2] = 4;
       },
       "variants.bias: seqlen_q is 4, must be 5"},
  };
  for (const auto& error : errors) {
    SCOPED_TRACE(error.message);
    Tensors t(DType::f32, 11);
    flashattn_params p = t.c_params();
    flashattn_variants v = flashattn_variants_defaults();
    error.breaks(v);
    EXPECT_EQ(flashattn_forward_variants(&p, &v), FLASHATTN_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(flashattn_last_error(), HasSubstr(error.message));
    t.expect_untouched();
  }
  EXPECT_EQ(flashattn_forward_variants(nullptr, nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("params: pointer is null"));
}

// A caller built against the first-generation header passes a struct that ends
// at alibi_slopes: it still works, and means no bias, whatever lies past its
// struct_size.
TEST(CApiVariants, FirstGenerationMeansNoBias) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  Tensors old(DType::f32, seed), cpp(DType::f32, seed);
  flashattn_params p = old.c_params();
  flashattn_variants v = c_variants();
  const BiasTensor bias(BiasType::boolean, false, seed);
  bias.set(v);  // past the struct_size below: not read
  v.struct_size = offsetof(flashattn_variants, alibi_slopes) + sizeof(const float*);
  ASSERT_EQ(flashattn_forward_variants(&p, &v), FLASHATTN_OK) << flashattn_last_error();
  Params pp = cpp.cpp_params();
  pp.variants = cpp_variants();
  forward(pp);
  EXPECT_EQ(std::memcmp(old.out.data(), cpp.out.data(), old.out.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(old.lse.data(), cpp.lse.data(), old.lse.size() * sizeof(float)), 0);
}

// A caller built against the second-generation header passes a struct that ends
// at bias_strides: it still works, and means no dropout, whatever lies past its
// struct_size; the third generation's dropout gives the C++ API's output.
TEST(CApiVariants, SecondGenerationMeansNoDropout) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  Tensors old(DType::f32, seed), cpp(DType::f32, seed), third(DType::f32, seed);
  flashattn_params p = old.c_params();
  flashattn_variants v = c_variants();
  v.dropout_p = 0.5f;  // past the struct_size below: not read
  v.dropout_seed = seed;
  v.struct_size = offsetof(flashattn_variants, bias_strides) + sizeof v.bias_strides;
  ASSERT_EQ(flashattn_forward_variants(&p, &v), FLASHATTN_OK) << flashattn_last_error();
  Params pp = cpp.cpp_params();
  pp.variants = cpp_variants();
  forward(pp);
  EXPECT_EQ(std::memcmp(old.out.data(), cpp.out.data(), old.out.size() * sizeof(float)), 0);

  v.struct_size = sizeof v;
  flashattn_params p3 = third.c_params();
  ASSERT_EQ(flashattn_forward_variants(&p3, &v), FLASHATTN_OK) << flashattn_last_error();
  pp.variants.dropout = {0.5f, seed, 0};
  forward(pp);
  EXPECT_EQ(std::memcmp(third.out.data(), cpp.out.data(), third.out.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(third.out.data(), old.out.data(), third.out.size() * sizeof(float)), 0);
}

// flashattn_forward_with on a packed batch in Tensors' buffers: q and out
// (1, 10, 4, 8), k and v (1, 14, 2, 8), the sequences as s says.
flashattn_status forward_packed(Tensors& t, const flashattn_sequences& s) {
  flashattn_params p = flashattn_default_params(
      flashattn_contiguous(t.q.data(), FLASHATTN_F32, 1, 10, 4, 8, FLASHATTN_CPU, 0),
      flashattn_contiguous(t.k.data(), FLASHATTN_F32, 1, 14, 2, 8, FLASHATTN_CPU, 0),
      flashattn_contiguous(t.v.data(), FLASHATTN_F32, 1, 14, 2, 8, FLASHATTN_CPU, 0),
      flashattn_contiguous(t.out.data(), FLASHATTN_F32, 1, 10, 4, 8, FLASHATTN_CPU, 0));
  p.lse = t.lse.data();
  flashattn_forward_options options = flashattn_forward_options_defaults();
  options.sequences = &s;
  return flashattn_forward_with(&p, &options);
}

// flashattn_sequences: a caller built against the first-generation header passes
// a struct that ends at batch, so it gives no max_seqlen values, whatever lies
// past its struct_size; from the second, one at or above the longest sequence
// changes nothing and one below it is rejected, writing nothing. q and out
// (1, 10, 4, 8) and k, v (1, 14, 2, 8) in Tensors' buffers: two sequences.
TEST(CApiSequences, MaxSeqlenFromTheSecondGeneration) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  const int32_t cu_q[] = {0, 3, 10}, cu_k[] = {0, 9, 14};
  constexpr uint32_t kFirstGeneration = offsetof(flashattn_sequences, batch) + sizeof(int32_t);
  const auto run = [&](Tensors& t, int64_t max_seqlen_q, uint32_t struct_size) {
    flashattn_sequences s = flashattn_sequences_defaults();
    s.cu_seqlens_q = cu_q;
    s.cu_seqlens_k = cu_k;
    s.batch = 2;
    s.max_seqlen_q = max_seqlen_q;
    s.struct_size = struct_size;
    return forward_packed(t, s);
  };
  EXPECT_EQ(flashattn_sequences_defaults().max_seqlen_q, -1);
  EXPECT_EQ(flashattn_sequences_defaults().max_seqlen_k, -1);
  Tensors plain(DType::f32, seed), given(DType::f32, seed), first(DType::f32, seed),
      short_of(DType::f32, seed);
  ASSERT_EQ(run(plain, -1, sizeof(flashattn_sequences)), FLASHATTN_OK) << flashattn_last_error();
  ASSERT_EQ(run(given, 7, sizeof(flashattn_sequences)), FLASHATTN_OK) << flashattn_last_error();
  ASSERT_EQ(run(first, 0, kFirstGeneration), FLASHATTN_OK) << flashattn_last_error();
  for (const Tensors* t : {&given, &first}) {
    EXPECT_EQ(std::memcmp(t->out.data(), plain.out.data(), plain.out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(t->lse.data(), plain.lse.data(), plain.lse.size() * sizeof(float)), 0);
  }
  EXPECT_EQ(run(short_of, 6, sizeof(flashattn_sequences)), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(),
              HasSubstr("sequences.max_seqlen_q: is 6, less than the longest sequence in "
                        "cu_seqlens_q (sequence 1: 7 = cu_seqlens_q[2] - cu_seqlens_q[1])"));
  short_of.expect_untouched();
}

// flashattn_sequences' third generation: checked, 1 by default. Host prefix sums
// are checked whatever it says (reading them waits for nothing): checked = 0 on
// the CPU gives the checked call's output, and broken sums are still rejected.
TEST(CApiSequences, CheckedFromTheThirdGeneration) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(replay_hint(seed));
  const int32_t cu_q[] = {0, 3, 10}, cu_k[] = {0, 9, 14}, broken_k[] = {0, 15, 14};
  const auto run = [&](Tensors& t, const int32_t* cu_seqlens_k, int32_t checked) {
    flashattn_sequences s = flashattn_sequences_defaults();
    s.cu_seqlens_q = cu_q;
    s.cu_seqlens_k = cu_seqlens_k;
    s.batch = 2;
    s.checked = checked;
    return forward_packed(t, s);
  };
  EXPECT_EQ(flashattn_sequences_defaults().checked, 1);
  Tensors checked(DType::f32, seed), unchecked(DType::f32, seed), broken(DType::f32, seed);
  ASSERT_EQ(run(checked, cu_k, 1), FLASHATTN_OK) << flashattn_last_error();
  ASSERT_EQ(run(unchecked, cu_k, 0), FLASHATTN_OK) << flashattn_last_error();
  EXPECT_EQ(std::memcmp(unchecked.out.data(), checked.out.data(),
                        checked.out.size() * sizeof(float)), 0);
  EXPECT_EQ(run(broken, broken_k, 0), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("sequences.cu_seqlens_k: entry 2 (14) is less "
                                                "than entry 1 (15)"));
  broken.expect_untouched();
}

TEST(CApi, NullParamsIsAnInvalidArgument) {
  EXPECT_EQ(flashattn_forward(nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("params: pointer is null"));
}

TEST(CApi, CudaTensorsWithoutGpuAreUnsupported) {
  if (cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is visible; this checks the no-GPU path";
  Tensors t(DType::f32, 3);
  flashattn_params p = t.c_params();
  for (flashattn_tensor* x : {&p.q, &p.k, &p.v, &p.out}) x->device = FLASHATTN_CUDA;
  EXPECT_EQ(flashattn_forward(&p), FLASHATTN_ERR_UNSUPPORTED);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("no CUDA device"));
  t.expect_untouched();
}

TEST(CApi, HostPointersLabelledCudaAreInvalid) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cuda_device_count() is 0";
  Tensors t(DType::f32, 3);
  flashattn_params p = t.c_params();
  for (flashattn_tensor* x : {&p.q, &p.k, &p.v, &p.out}) x->device = FLASHATTN_CUDA;
  EXPECT_EQ(flashattn_forward(&p), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("q: "));
  t.expect_untouched();
}

TEST(CApi, LastErrorIsClearedBySuccess) {
  Tensors t(DType::f32, 5);
  flashattn_params p = t.c_params();
  p.q.data = nullptr;
  ASSERT_EQ(flashattn_forward(&p), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(flashattn_last_error(), "");
  p.q.data = t.q.data();
  ASSERT_EQ(flashattn_forward(&p), FLASHATTN_OK);
  EXPECT_STREQ(flashattn_last_error(), "");
}

TEST(CApi, LastErrorIsPerThread) {
  ASSERT_EQ(flashattn_forward(nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] {
    other = flashattn_last_error();  // nothing failed on this thread yet
    Tensors t(DType::f32, 9);
    flashattn_params p = t.c_params();
    p.mask = 9;
    flashattn_forward(&p);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_THAT(flashattn_last_error(), HasSubstr("params: pointer is null"));
}

}  // namespace
}  // namespace flashattn::test

namespace flashattn::test {
namespace {

// One f32 backward problem, (1, 6, 2, 8) everywhere, with its forward run
// through the C ABI (with `variants`, or none): the C struct and the C++ one
// over the same inputs, each with its own gradients (sentinel-filled).
struct BackwardTensors {
  static constexpr int kN = 6, kH = 2, kD = 8, kElems = kN * kH * kD;
  std::vector<float> q, k, v, out, dout, lse;
  std::vector<float> dq, dk, dv, dq_cpp, dk_cpp, dv_cpp;

  explicit BackwardTensors(const flashattn_variants* variants)
      : q(kElems), k(kElems), v(kElems), out(kElems), dout(kElems), lse(kN * kH),
        dq(kElems, kSentinel), dk(dq), dv(dq), dq_cpp(dq), dk_cpp(dq), dv_cpp(dq) {
    for (int e = 0; e < kElems; ++e) {
      q[e] = std::sin(0.3f * e);
      k[e] = std::cos(0.7f * e);
      v[e] = std::sin(1.1f * e + 0.5f);
      dout[e] = std::cos(0.2f * e + 1.0f);
    }
    flashattn_params fwd = flashattn_default_params(c_view(q), c_view(k), c_view(v), c_view(out));
    fwd.lse = lse.data();
    fwd.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    EXPECT_EQ(flashattn_forward_variants(&fwd, variants), FLASHATTN_OK) << flashattn_last_error();
  }
  static flashattn_tensor c_view(std::vector<float>& t) {
    return flashattn_contiguous(t.data(), FLASHATTN_F32, 1, kN, kH, kD, FLASHATTN_CPU, 0);
  }
  static TensorView view(std::vector<float>& t) {
    return contiguous_view(t.data(), DType::f32, 1, kN, kH, kD);
  }
  flashattn_backward_params c_params() {
    flashattn_backward_params p = flashattn_backward_defaults();
    p.q = c_view(q);
    p.k = c_view(k);
    p.v = c_view(v);
    p.out = c_view(out);
    p.dout = c_view(dout);
    p.lse = lse.data();
    p.dq = c_view(dq);
    p.dk = c_view(dk);
    p.dv = c_view(dv);
    p.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    return p;
  }
  BackwardParams cpp_params() {
    BackwardParams p;
    p.q = view(q);
    p.k = view(k);
    p.v = view(v);
    p.out = view(out);
    p.dout = view(dout);
    p.lse = lse.data();
    p.dq = view(dq_cpp);
    p.dk = view(dk_cpp);
    p.dv = view(dv_cpp);
    p.mask = Mask::causal_top_left;
    return p;
  }
  void expect_same_gradients() const {
    EXPECT_EQ(0, std::memcmp(dq.data(), dq_cpp.data(), dq.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dk.data(), dk_cpp.data(), dk.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dv.data(), dv_cpp.data(), dv.size() * sizeof(float)));
  }
};

// flashattn_backward: the sized struct from flashattn_backward_defaults() gives
// the C++ API's gradients bit for bit; a struct_size short of the first
// generation is refused naming it; the backend table reports which backends
// have a backward.
TEST(CApiBackward, MatchesCppApiBitForBit) {
  BackwardTensors t(nullptr);
  flashattn_backward_params bwd = t.c_params();
  EXPECT_EQ(bwd.struct_size, sizeof(flashattn_backward_params));
  ASSERT_EQ(flashattn_backward(&bwd), FLASHATTN_OK) << flashattn_last_error();
  backward(t.cpp_params());
  t.expect_same_gradients();

  bwd.struct_size = 8;
  std::fill(t.dq.begin(), t.dq.end(), kSentinel);
  EXPECT_EQ(flashattn_backward(&bwd), FLASHATTN_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(flashattn_last_error(), HasSubstr("params: struct_size is 8"));
  for (float x : t.dq) ASSERT_EQ(x, kSentinel);
  EXPECT_EQ(flashattn_backward(nullptr), FLASHATTN_ERR_INVALID_ARGUMENT);
}

// The forward's variants through flashattn_backward_params.variants: the C++
// API's gradients with the same variants, bit for bit.
TEST(CApiBackward, VariantsMatchCppApiBitForBit) {
  const flashattn_variants v = c_variants();
  BackwardTensors t(&v);
  flashattn_backward_params bwd = t.c_params();
  bwd.variants = &v;
  ASSERT_EQ(flashattn_backward(&bwd), FLASHATTN_OK) << flashattn_last_error();
  BackwardParams p = t.cpp_params();
  p.variants = cpp_variants();
  backward(p);
  t.expect_same_gradients();
}

// A caller built against the previous header passes a struct that ends at
// `stream`: it still works, and means no variants, whatever lies past its
// struct_size.
TEST(CApiBackward, PreviousGenerationMeansNoVariants) {
  BackwardTensors t(nullptr);
  flashattn_backward_params bwd = t.c_params();
  const flashattn_variants v = c_variants();
  bwd.variants = &v;  // past the struct_size below: not read
  bwd.struct_size = offsetof(flashattn_backward_params, stream) + sizeof(void*);
  ASSERT_EQ(flashattn_backward(&bwd), FLASHATTN_OK) << flashattn_last_error();
  backward(t.cpp_params());
  t.expect_same_gradients();
}

// A boolean mask (1, 2, 6, 6) through flashattn_backward_params.variants, with
// the forward's other variants: the C++ API's gradients, bit for bit. Its row 2
// of head 1 is all false (dq 0 there), and every 4th element is.
TEST(CApiBackward, BiasMatchesCppApiBitForBit) {
  std::vector<uint8_t> mask(72);
  for (int e = 0; e < 72; ++e) mask[size_t(e)] = e % 4 == 1 || (e >= 48 && e < 54) ? 0 : 1;
  flashattn_variants v = c_variants();
  v.bias = mask.data();
  v.bias_type = FLASHATTN_BIAS_BOOL;
  const int64_t shape[4] = {1, 2, 6, 6}, strides[4] = {72, 36, 6, 1};
  std::copy(shape, shape + 4, v.bias_shape);
  std::copy(strides, strides + 4, v.bias_strides);
  BackwardTensors t(&v);
  flashattn_backward_params bwd = t.c_params();
  bwd.variants = &v;
  ASSERT_EQ(flashattn_backward(&bwd), FLASHATTN_OK) << flashattn_last_error();
  BackwardParams p = t.cpp_params();
  p.variants = cpp_variants();
  p.variants.bias.data = mask.data();
  p.variants.bias.type = BiasType::boolean;
  std::copy(shape, shape + 4, p.variants.bias.shape);
  std::copy(strides, strides + 4, p.variants.bias.stride);
  backward(p);
  t.expect_same_gradients();
  for (int c = 0; c < BackwardTensors::kD; ++c)  // row 2, head 1: fully masked
    EXPECT_EQ(t.dq[(2 * BackwardTensors::kH + 1) * BackwardTensors::kD + c], 0.0f);
}

TEST(CApiBackward, BackendInfoReportsTheBackward) {
  for (int32_t i = 0; i < flashattn_backend_count(); ++i) {
    flashattn_backend_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(flashattn_get_backend_info(i, &info), FLASHATTN_OK);
    EXPECT_EQ(info.backward_max_head_dim, backends()[size_t(i)].backward_max_head_dim) << info.name;
  }
}

}  // namespace
}  // namespace flashattn::test
