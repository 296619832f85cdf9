// The CUDA backends on random problems: the shared case list plus shapes only a
// GPU runs quickly (head_dim 1024 at seqlen 256, seqlen 4097 at head_dim 64,
// batch > 1), lse included. And the device rules: CUDA backends refuse CPU
// tensors, CPU backends refuse CUDA tensors, host pointers labelled cuda are
// rejected. Tests that need a GPU skip, saying so, when none is visible.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cases.h"
#include "device_memory.h"

namespace flashattn::test {
namespace {

using testing::HasSubstr;

bool have_gpu() { return cuda_device_count() > 0; }

bool have_hopper() {
  const std::vector<Backend> on_gpu = available_backends(DeviceKind::cuda);
  return std::find(on_gpu.begin(), on_gpu.end(), Backend::cuda_wgmma) != on_gpu.end();
}

constexpr const char* kNoGpu =
    "no CUDA device: cuda_device_count() is 0 (no GPU or driver, or a build without CUDA)";

// The shared list, then larger shapes for the GPU only.
std::vector<harness::Case> cuda_cases() {
  std::vector<harness::Case> cases = shared_cases();
  auto add = [&](harness::Shape shape, DType dtype, Mask mask, bool strided) {
    cases.push_back(make_case(shape, dtype, mask, strided));
  };
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    add({1, 256, 256, 2, 2, 1024}, dtype, Mask::none, false);
    add({1, 256, 300, 2, 1, 1024}, dtype, Mask::causal_bottom_right, true);
  }
  // fp32 grids of more blocks than SMs (cuda_f16x3 without key splits), with
  // GQA, both causal alignments and a strided view.
  add({4, 300, 513, 32, 8, 64}, DType::f32, Mask::causal_bottom_right, false);
  add({2, 600, 600, 48, 16, 128}, DType::f32, Mask::causal_top_left, true);
  add({1, 700, 650, 160, 32, 32}, DType::f32, Mask::none, false);
  // fp32 values far outside fp16's range, each way, which cuda_f16x3's power-of-
  // two scales must carry: std 1e12 (the scale keeps the scores moderate) and
  // std 1e-12 (near-uniform attention over tiny values).
  harness::Case huge = make_case({1, 200, 333, 4, 2, 64}, DType::f32, Mask::causal_bottom_right,
                                 false);
  huge.input_std = 1e12f;
  huge.scale = 0.125e-24f;
  cases.push_back(huge);
  harness::Case tiny = make_case({2, 150, 97, 2, 1, 40}, DType::f32, Mask::none, true);
  tiny.input_std = 1e-12f;
  cases.push_back(tiny);
  // cuda_f16x3's wide heads (buckets 256, 512, 1024, dims padded into them):
  // the exercise's one head of 1000 rows (keys split over blocks, merged), GQA,
  // both causal alignments with rows that see no key, seqlen_k 1, strided
  // (unaligned, element-wise) views, and a grid of many tiles.
  add({1, 1000, 1000, 1, 1, 1024}, DType::f32, Mask::none, false);
  add({1, 333, 1000, 2, 1, 1024}, DType::f32, Mask::causal_bottom_right, true);
  add({1, 257, 300, 2, 2, 1000}, DType::f32, Mask::causal_top_left, false);
  add({1, 300, 100, 2, 2, 500}, DType::f32, Mask::causal_bottom_right, true);
  add({2, 130, 77, 4, 2, 200}, DType::f32, Mask::causal_top_left, false);
  add({1, 17, 1, 3, 1, 300}, DType::f32, Mask::none, false);
  add({2, 600, 900, 4, 4, 256}, DType::f32, Mask::none, false);
  // cuda_tiled's one-pass fp32 path at its limits (64 rows and keys, head_dim
  // 64): rows that see no key, GQA, strided (unaligned) views, odd head dims.
  add({1, 64, 40, 4, 2, 64}, DType::f32, Mask::causal_bottom_right, true);
  add({2, 50, 64, 3, 1, 60}, DType::f32, Mask::causal_top_left, false);
  add({1, 33, 64, 2, 2, 37}, DType::f32, Mask::none, true);
  // Its register path (head_dim and keys at most 32): 16-byte rows (plain and
  // strided) and element-wise ones, GQA and MQA, rows that see no key, batch > 1.
  add({2, 17, 17, 3, 3, 32}, DType::f32, Mask::none, false);
  add({1, 40, 20, 4, 2, 32}, DType::f32, Mask::causal_bottom_right, true);
  add({3, 5, 32, 2, 1, 28}, DType::f32, Mask::causal_top_left, false);
  add({2, 64, 31, 2, 1, 13}, DType::f32, Mask::causal_bottom_right, true);
  cases.push_back(make_case({1, 9, 32, 2, 2, 24}, DType::f32, Mask::causal_top_left, true, 8));
  // cuda_mma's head-dim buckets (32, 64, 96, 128, 192, 256, 512), dims padded
  // into them (40, 72, 136, 264, 500), several key blocks with the causal
  // diagonal and ragged ends, GQA, strided (unaligned, element-wise) views.
  add({2, 300, 333, 4, 2, 32}, DType::f16, Mask::causal_bottom_right, false);
  add({1, 513, 700, 2, 1, 64}, DType::bf16, Mask::causal_top_left, false);
  add({2, 257, 190, 2, 2, 96}, DType::f16, Mask::none, true);
  add({1, 1000, 1000, 2, 1, 128}, DType::bf16, Mask::causal_top_left, false);
  add({1, 1000, 1000, 2, 1, 128}, DType::f16, Mask::none, false);
  add({1, 130, 200, 2, 2, 192}, DType::bf16, Mask::causal_bottom_right, true);
  add({2, 200, 129, 2, 1, 256}, DType::f16, Mask::causal_top_left, false);
  add({1, 100, 150, 2, 2, 512}, DType::bf16, Mask::none, false);
  // Whole unmasked tiles after a ragged first block, in the one-slice-per-warp
  // shapes' inner loop (d 192, 256).
  add({1, 200, 333, 2, 1, 192}, DType::bf16, Mask::none, false);
  add({2, 150, 333, 2, 2, 256}, DType::f16, Mask::none, false);
  add({1, 70, 90, 2, 2, 40}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 90, 70, 3, 1, 72}, DType::f16, Mask::causal_bottom_right, false);
  add({1, 65, 129, 2, 2, 136}, DType::f16, Mask::none, true);
  add({1, 64, 64, 2, 2, 264}, DType::bf16, Mask::causal_top_left, false);
  add({1, 33, 77, 1, 1, 500}, DType::f16, Mask::causal_bottom_right, true);
  add({1, 4097, 4097, 2, 1, 64}, DType::f32, Mask::none, false);
  add({1, 4097, 4097, 2, 1, 64}, DType::f16, Mask::causal_bottom_right, false);
  add({1, 4097, 4097, 2, 2, 64}, DType::bf16, Mask::causal_top_left, true);
  add({4, 200, 300, 4, 2, 64}, DType::f32, Mask::causal_bottom_right, true);
  add({4, 300, 200, 4, 2, 64}, DType::f16, Mask::causal_top_left, false);
  add({3, 129, 257, 6, 3, 128}, DType::bf16, Mask::none, true);
  // Grids of a thousand blocks and more, as benchmarks run them.
  add({4, 1024, 1024, 16, 8, 64}, DType::f32, Mask::causal_bottom_right, false);
  add({2, 1024, 1100, 16, 16, 128}, DType::f32, Mask::none, true);
  return cases;
}

// cuda_wgmma: the cases above whose tensors TMA can describe (head_dim a
// multiple of 8; strided q and out padded to keep rows 16-byte aligned), plus
// its own tiles: each head-dim bucket (64, 128, 192, 256, 384, 512) and padded
// dims (80, 200, 264, 320, 448) over many more key blocks than ring stages, so
// every mbarrier phase wraps, with both causal alignments and GQA; the kernels
// whose Q·Kᵀ stops short of the bucket.
std::vector<harness::Case> wgmma_cases() {
  std::vector<harness::Case> cases = tma_cases(cuda_cases());
  auto add = [&](harness::Shape shape, DType dtype, Mask mask, bool strided) {
    cases.push_back(make_case(shape, dtype, mask, strided, 8));
  };
  add({2, 1500, 1500, 4, 2, 64}, DType::bf16, Mask::none, false);
  add({1, 1500, 1700, 2, 1, 128}, DType::f16, Mask::causal_bottom_right, true);
  add({1, 1100, 900, 2, 2, 192}, DType::bf16, Mask::causal_top_left, false);
  add({1, 700, 1300, 2, 1, 256}, DType::f16, Mask::none, false);
  add({2, 600, 600, 2, 2, 80}, DType::f16, Mask::causal_top_left, true);
  add({1, 333, 1000, 3, 1, 200}, DType::bf16, Mask::causal_bottom_right, false);
  // Warpgroups that skip key blocks: one with no visible key in a tile whose
  // other rows see some (rows < 260 see none), ones whose rows all lie past
  // seqlen_q, and the diagonal of a long causal sequence with a ragged end.
  add({1, 300, 40, 2, 1, 64}, DType::bf16, Mask::causal_bottom_right, false);
  add({2, 1, 700, 2, 2, 64}, DType::f16, Mask::none, false);
  add({1, 4097, 4097, 1, 1, 64}, DType::bf16, Mask::causal_top_left, false);
  // Persistent blocks (d 64 and 128, up to 4096 keys causal, 2048 otherwise)
  // walking several tiles each, one tile's last P·V issued with the next one's
  // first Q·Kᵀ, some tiles with no visible key; causal tiles shifted
  // before row 0; and d 128 past the persistent limit.
  add({2, 400, 400, 32, 8, 64}, DType::f16, Mask::causal_top_left, false);
  add({2, 1000, 1000, 48, 16, 64}, DType::bf16, Mask::none, false);
  add({1, 700, 300, 40, 8, 128}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 900, 900, 40, 40, 128}, DType::f16, Mask::none, true);
  add({1, 300, 5000, 2, 1, 128}, DType::f16, Mask::none, false);
  // The last wave's tiles split by keys (core/tail_split.h) on a GPU of up to
  // 132 SMs: one partial wave of 20 tiles in 6 parts, GQA, both ends ragged;
  // two full waves of 132 and 8 tiles in 4 parts; the 64 bucket's Q·Kᵀ at 48.
  add({1, 700, 4100, 5, 1, 64}, DType::bf16, Mask::none, true);
  add({2, 2049, 3000, 8, 2, 128}, DType::f16, Mask::none, false);
  add({1, 1500, 3333, 3, 3, 40}, DType::bf16, Mask::none, false);
  // Persistent tiles in pairs (d 128 bucket, non-causal, an even number of
  // tiles per head), each block loading half of every K and V block for both:
  // the second half of the last block partly past seqlen_k, GQA, a padded
  // head dim. Cases above pair too: 129 × 257 (that half wholly past the end),
  // 1024 × 1100 (two rounds of tiles), 900 × 900.
  add({1, 200, 2000, 4, 1, 128}, DType::f16, Mask::none, true);
  add({1, 500, 700, 3, 1, 96}, DType::bf16, Mask::none, false);
  // Q·Kᵀ only as deep as q's head_dim (48 in the 64 bucket, 80 or 96 in the
  // 128, 160 in the 192; the 32, 40, 72, 80, 96 and 136 above run it too): per
  // tile past the persistent limit, in pairs, and the 192 bucket's, one of
  // them causal and strided.
  add({2, 700, 2300, 4, 2, 40}, DType::f16, Mask::none, false);
  add({1, 300, 2600, 2, 1, 72}, DType::f16, Mask::none, false);
  add({1, 512, 1000, 4, 2, 80}, DType::bf16, Mask::none, false);
  add({2, 256, 256, 4, 4, 160}, DType::f16, Mask::none, false);
  add({1, 300, 700, 2, 1, 152}, DType::bf16, Mask::causal_top_left, true);
  // The buckets split by columns (384, 512: two consumers on one 64-row tile,
  // the partial scores added through shared memory): many key blocks, ragged
  // ends, GQA, strided views, a single row, rows that see no key.
  add({1, 700, 1300, 2, 1, 512}, DType::bf16, Mask::none, false);
  add({2, 333, 900, 4, 2, 384}, DType::f16, Mask::causal_bottom_right, true);
  add({1, 500, 400, 2, 2, 320}, DType::bf16, Mask::causal_top_left, false);
  add({1, 300, 40, 2, 1, 448}, DType::f16, Mask::causal_bottom_right, false);
  add({2, 1, 700, 2, 2, 512}, DType::f16, Mask::none, true);
  add({1, 257, 1000, 8, 4, 264}, DType::bf16, Mask::causal_top_left, false);
  // Rows that start off 32-byte sectors (264, 312, 392 columns) with enough
  // query rows per kv head (4096, causal ones counted half) that K and V are
  // first copied into aligned rows (sm90/aligned_kv.h): strided, GQA, both
  // buckets, both dtypes.
  add({1, 2100, 700, 4, 1, 264}, DType::bf16, Mask::causal_bottom_right, true);
  add({2, 2100, 300, 4, 2, 312}, DType::f16, Mask::none, false);
  add({1, 2100, 500, 4, 1, 392}, DType::bf16, Mask::causal_top_left, false);
  // The 384 bucket at widths 288 and 320 (264 and 320 above run them too):
  // Q·Kᵀ that deep and P·V that wide in the consumers' uneven shares (P·V 128
  // and 160 or 192 columns, the second's last panel part-filled at 288; Q·Kᵀ
  // 160 or 192 and 128 deep, the second's depth starting inside a panel at
  // 288); rows that see no key, a two-row tile, strided and GQA; and the full
  // width below 384.
  add({2, 300, 700, 4, 2, 288}, DType::f16, Mask::none, true);
  add({1, 129, 513, 2, 1, 312}, DType::f16, Mask::causal_bottom_right, false);
  add({1, 300, 100, 2, 1, 280}, DType::bf16, Mask::causal_bottom_right, false);
  add({2, 2, 900, 3, 1, 296}, DType::bf16, Mask::causal_bottom_right, true);
  add({1, 200, 600, 2, 1, 352}, DType::bf16, Mask::none, false);
  // The 192 and 256 buckets' 128-row tiles (two consumers), where the 64-row
  // tiles of one consumer would not fit one wave of up to 132 SMs (the cases
  // above at 152-256 all run on those): causal with a ragged end, GQA, Q·Kᵀ
  // at 160, strided.
  add({2, 1100, 900, 8, 2, 192}, DType::bf16, Mask::causal_bottom_right, false);
  add({1, 700, 1300, 16, 4, 256}, DType::f16, Mask::none, true);
  add({4, 300, 700, 8, 1, 160}, DType::bf16, Mask::causal_top_left, false);
  return cases;
}

class CudaBackend : public testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  }
};

TEST_P(CudaBackend, MatchesFloat64Reference) {
  expect_accurate(GetParam(), Device{DeviceKind::cuda, 0});
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaBackend,
    testing::ValuesIn(with_backends({Backend::cuda_naive, Backend::cuda_tiled, Backend::cuda_tf32x3,
                                     Backend::cuda_f16x3, Backend::cuda_mma},
                                    cuda_cases())),
    [](const testing::TestParamInfo<BackendCase>& info) { return backend_case_name(info.param); });

class HopperBackend : public CudaBackend {
 protected:
  void SetUp() override {
    CudaBackend::SetUp();
    if (!IsSkipped() && !have_hopper()) GTEST_SKIP() << "GPU 0 is not a Hopper (sm_90) GPU";
  }
};

TEST_P(HopperBackend, MatchesFloat64Reference) {
  expect_accurate(GetParam(), Device{DeviceKind::cuda, 0});
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HopperBackend, testing::ValuesIn(with_backends({Backend::cuda_wgmma}, wgmma_cases())),
    [](const testing::TestParamInfo<BackendCase>& info) { return backend_case_name(info.param); });

// A small valid f32 problem in host memory: (1, 8, 2, 16) everywhere, out and
// lse filled with a sentinel so a rejected call can be seen to leave them alone.
struct HostTensors {
  static constexpr float kSentinel = 42.0f;
  std::vector<float> q, k, v, out, lse;
  HostTensors()
      : q(256, 0.5f), k(256, 0.25f), v(256, 1.0f), out(256, kSentinel), lse(16, kSentinel) {}

  Params params(Device device, Backend backend) {
    Params p;
    p.q = contiguous_view(q.data(), DType::f32, 1, 8, 2, 16, device);
    p.k = contiguous_view(k.data(), DType::f32, 1, 8, 2, 16, device);
    p.v = contiguous_view(v.data(), DType::f32, 1, 8, 2, 16, device);
    p.out = contiguous_view(out.data(), DType::f32, 1, 8, 2, 16, device);
    p.lse = lse.data();
    p.backend = backend;
    return p;
  }
  void expect_untouched() const {
    for (float x : out) ASSERT_EQ(x, kSentinel) << "out was written by a rejected call";
    for (float x : lse) ASSERT_EQ(x, kSentinel) << "lse was written by a rejected call";
  }
};

// Expects forward(p) to throw Error(status) whose message contains every part.
void expect_error(const Params& p, Status status, const std::vector<std::string>& parts) {
  try {
    forward(p);
    ADD_FAILURE() << "forward accepted the call";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& part : parts) EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

TEST(DeviceRules, CudaBackendOnCpuTensorsIsUnsupported) {
  for (Backend backend : {Backend::cuda_naive, Backend::cuda_tiled, Backend::cuda_tf32x3,
                          Backend::cuda_f16x3, Backend::cuda_mma, Backend::cuda_wgmma}) {
    SCOPED_TRACE(std::string(to_string(backend)));
    HostTensors t;
    expect_error(
        t.params(Device{}, backend), Status::unsupported,
        {"backend: " + std::string(to_string(backend)), "runs on cuda tensors", "q is on cpu"});
    t.expect_untouched();
  }
}

TEST(DeviceRules, CudaTensorsWithoutGpuAreUnsupported) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is visible; this checks the no-GPU path";
  for (Backend backend : {Backend::automatic, Backend::cuda_tiled, Backend::cpu}) {
    SCOPED_TRACE(std::string(to_string(backend)));
    HostTensors t;
    expect_error(t.params(Device{DeviceKind::cuda, 0}, backend), Status::unsupported,
                 {"q: device is cuda", "no CUDA device"});
    t.expect_untouched();
  }
  EXPECT_TRUE(available_backends(DeviceKind::cuda).empty());
}

// Device rules that need a GPU to reach: every test skips without one.
class DeviceRulesOnGpu : public testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  }
};

TEST_F(DeviceRulesOnGpu, CudaBackendsAreAvailable) {
  // In the registry's order; cuda_wgmma joins them on a Hopper GPU only.
  std::vector<Backend> available = available_backends(DeviceKind::cuda);
  std::erase(available, Backend::cuda_wgmma);
  EXPECT_EQ(available,
            (std::vector<Backend>{Backend::cuda_naive, Backend::cuda_tiled, Backend::cuda_tf32x3,
                                  Backend::cuda_mma, Backend::cuda_f16x3}));
}

// q, k, v, out and lse in device memory of GPU 0, with f32 (1, 8, 2, 16) views.
struct DeviceTensors {
  harness::DeviceBuffer q{1024, 0}, k{1024, 0}, v{1024, 0}, out{1024, 0}, lse{64, 0};
  Params params(Backend backend) const {
    const Device gpu{DeviceKind::cuda, 0};
    Params p;
    p.q = contiguous_view(q.data(), DType::f32, 1, 8, 2, 16, gpu);
    p.k = contiguous_view(k.data(), DType::f32, 1, 8, 2, 16, gpu);
    p.v = contiguous_view(v.data(), DType::f32, 1, 8, 2, 16, gpu);
    p.out = contiguous_view(out.data(), DType::f32, 1, 8, 2, 16, gpu);
    p.lse = static_cast<float*>(lse.data());
    p.backend = backend;
    return p;
  }
};

TEST_F(DeviceRulesOnGpu, CpuBackendOnCudaTensorsIsUnsupported) {
  DeviceTensors t;
  EXPECT_EQ(select_backend(t.params(Backend::automatic)), Backend::cuda_tiled);  // tiny: 8 f32 rows
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    SCOPED_TRACE(std::string(to_string(backend)));
    expect_error(
        t.params(backend), Status::unsupported,
        {"backend: " + std::string(to_string(backend)), "runs on cpu tensors", "q is on cuda"});
  }
}

// Device buffers for one (1, 8, 2, head_dim) problem of `dtype`.
struct DeviceProblem {
  DType dtype;
  int head_dim;
  harness::DeviceBuffer q, k, v, out;
  DeviceProblem(DType d, int dim)
      : dtype(d), head_dim(dim), q(bytes(), 0), k(bytes(), 0), v(bytes(), 0), out(bytes(), 0) {}
  size_t bytes() const { return 16 * size_t(head_dim) * dtype_size(dtype); }
  Params params(Backend backend) const {
    const Device gpu{DeviceKind::cuda, 0};
    Params p;
    p.q = contiguous_view(q.data(), dtype, 1, 8, 2, head_dim, gpu);
    p.k = contiguous_view(k.data(), dtype, 1, 8, 2, head_dim, gpu);
    p.v = contiguous_view(v.data(), dtype, 1, 8, 2, head_dim, gpu);
    p.out = contiguous_view(out.data(), dtype, 1, 8, 2, head_dim, gpu);
    p.backend = backend;
    return p;
  }
};

TEST_F(DeviceRulesOnGpu, AutomaticPicksTensorCoresFor16BitUpToTheirHeadDimLimit) {
  const Backend hopper_or_mma = have_hopper() ? Backend::cuda_wgmma : Backend::cuda_mma;
  for (DType dtype : {DType::f16, DType::bf16}) {
    // head_dim 1 is not a multiple of 8, which TMA rows need: mma.sync.
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 1).params(Backend::automatic)), Backend::cuda_mma);
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 128).params(Backend::automatic)), hopper_or_mma);
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 256).params(Backend::automatic)), hopper_or_mma);
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 264).params(Backend::automatic)), hopper_or_mma);
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 512).params(Backend::automatic)), hopper_or_mma);
    // 500 is not a multiple of 8: mma.sync.
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 500).params(Backend::automatic)),
              Backend::cuda_mma);
    EXPECT_EQ(select_backend(DeviceProblem(dtype, 513).params(Backend::automatic)),
              Backend::cuda_tiled);
  }
}

TEST_F(DeviceRulesOnGpu, AutomaticPicksF16x3ForFp32WhereQueryTilesShareKeys) {
  const Device gpu{DeviceKind::cuda, 0};
  const harness::DeviceBuffer in(size_t(256) * 2 * 1025 * 4, 0), out(size_t(256) * 2 * 1025 * 4, 0);
  auto f32_params = [&](int seqlen, int head_dim) {
    Params p;
    p.q = p.k = p.v = contiguous_view(in.data(), DType::f32, 1, seqlen, 2, head_dim, gpu);
    p.out = contiguous_view(out.data(), DType::f32, 1, seqlen, 2, head_dim, gpu);
    return p;
  };
  EXPECT_EQ(select_backend(f32_params(256, 128)), Backend::cuda_f16x3);
  EXPECT_EQ(select_backend(f32_params(255, 128)), Backend::cuda_tf32x3);  // under 4 query tiles
  EXPECT_EQ(select_backend(f32_params(64, 129)), Backend::cuda_f16x3);    // wide heads: 2 tiles
  EXPECT_EQ(select_backend(f32_params(64, 1024)), Backend::cuda_f16x3);
  EXPECT_EQ(select_backend(f32_params(63, 1024)), Backend::cuda_tf32x3);
  EXPECT_EQ(select_backend(f32_params(256, 1025)), Backend::cuda_tf32x3);  // head_dim
}

TEST_F(DeviceRulesOnGpu, TensorCoreBackendRejectsF32AndWideHeads) {
  expect_error(DeviceProblem(DType::f32, 64).params(Backend::cuda_mma), Status::unsupported,
               {"backend: cuda_mma takes f16 or bf16 tensors only, but q is f32"});
  expect_error(DeviceProblem(DType::bf16, 1024).params(Backend::cuda_mma), Status::unsupported,
               {"q: head_dim 1024 exceeds cuda_mma's limit of 512"});
}

TEST_F(DeviceRulesOnGpu, HopperBackendStatesWhatItNeeds) {
  expect_error(DeviceProblem(DType::f32, 64).params(Backend::cuda_wgmma), Status::unsupported,
               {"backend: cuda_wgmma takes f16 or bf16 tensors only, but q is f32"});
  expect_error(DeviceProblem(DType::bf16, 520).params(Backend::cuda_wgmma), Status::unsupported,
               {"q: head_dim 520 exceeds cuda_wgmma's limit of 512", "auto runs it on cuda_tiled"});
  if (!have_hopper()) {
    expect_error(DeviceProblem(DType::bf16, 64).params(Backend::cuda_wgmma), Status::unsupported,
                 {"cuda_wgmma runs on 9.0 (Hopper) only"});
    return;
  }
  expect_error(DeviceProblem(DType::f16, 4).params(Backend::cuda_wgmma), Status::unsupported,
               {"q: head_dim 4 is not a multiple of 8"});
  DeviceProblem odd(DType::f16, 64);
  Params p = odd.params(Backend::cuda_wgmma);
  p.k.shape[1] = 7;  // seqlen_k 7 over a row stride of 129 elements: 258 bytes
  p.k.stride[1] = 129;
  p.v.shape[1] = 7;
  expect_error(p, Status::unsupported,
               {"k: seqlen stride of 129 elements is not a positive multiple of 16 bytes"});
  // 2^29 keys, one row read at each (stride 0): past the kernels' 32-bit key ranges.
  DeviceProblem wide(DType::f16, 64);
  Params far = wide.params(Backend::cuda_wgmma);
  for (TensorView* kv : {&far.k, &far.v}) {
    kv->shape[1] = int64_t(1) << 29;  // core/mask.h, RowMask::kSmallSeqlen
    kv->stride[1] = 0;
  }
  expect_error(far, Status::unsupported,
               {"k: seqlen 536870912 is not below 2^29, as cuda_wgmma needs"});
}

TEST_F(DeviceRulesOnGpu, HostPointersLabelledCudaAreRejected) {
  for (Backend backend : {Backend::cuda_naive, Backend::cuda_tiled, Backend::cuda_tf32x3,
                          Backend::cuda_f16x3, Backend::cuda_mma, Backend::cuda_wgmma}) {
    SCOPED_TRACE(std::string(to_string(backend)));
    HostTensors t;
    expect_error(t.params(Device{DeviceKind::cuda, 0}, backend), Status::invalid_argument,
                 {"q: device is cuda:0", "not memory that device can access"});
    t.expect_untouched();
  }
  // One host pointer among device ones: the message names that argument.
  HostTensors host;
  void* host_data[] = {host.q.data(), host.k.data(), host.v.data(), host.out.data()};
  const char* names[] = {"q", "k", "v", "out", "lse"};
  const DeviceTensors device;
  for (int which = 0; which < 5; ++which) {
    SCOPED_TRACE(names[which]);
    Params p = device.params(Backend::cuda_tiled);
    TensorView* views[] = {&p.q, &p.k, &p.v, &p.out};
    if (which < 4)
      views[which]->data = host_data[which];
    else
      p.lse = host.lse.data();
    expect_error(p, Status::invalid_argument,
                 {std::string(names[which]) + ": ", "not memory that device can access"});
  }
  host.expect_untouched();
}

TEST_F(DeviceRulesOnGpu, CudaDeviceIndexOutOfRangeIsRejected) {
  HostTensors t;
  expect_error(t.params(Device{DeviceKind::cuda, cuda_device_count()}, Backend::automatic),
               Status::invalid_argument, {"q: cuda device index", "out of range"});
  expect_error(t.params(Device{DeviceKind::cuda, -1}, Backend::automatic), Status::invalid_argument,
               {"q: cuda device index -1", "out of range"});
  t.expect_untouched();
}

}  // namespace
}  // namespace flashattn::test
