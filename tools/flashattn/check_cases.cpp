#include "check_cases.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace flashattn::cli {
namespace {

// Work caps for random cases. On the CPU every backend, the reference among
// them, runs the whole problem: 3e8 flops keeps the default sweep of 100 cases
// under 10 s on two cores. On the GPU the cost is the CPU reference on at most 256
// sampled rows, and the inputs' size.
constexpr double kCpuFlopLimit = 3e8;
constexpr double kGpuReferenceFlopLimit = 2e9;
constexpr double kGpuElementLimit = 3e7;
// --quick: small cases only, for runs under compute-sanitizer (about 100× slower).
constexpr double kQuickFlopLimit = 2e7;

harness::Case make(int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                   DType dtype, Mask mask, bool strided = false, int strided_pad = 3) {
  harness::Case c;
  c.shape = {batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim};
  c.dtype = dtype;
  c.mask = mask;
  c.strided = strided;
  c.strided_pad = strided_pad;
  return c;
}

std::vector<harness::Case> awkward_cases(DeviceKind device) {
  constexpr Mask none = Mask::none, tl = Mask::causal_top_left, br = Mask::causal_bottom_right;
  std::vector<harness::Case> cases = {
      make(1, 1, 1, 1, 1, 1, DType::f32, none),
      make(2, 17, 17, 3, 3, 3, DType::f16, tl),
      make(1, 1000, 1000, 1, 1, 80, DType::bf16, br),
      make(1, 17, 1000, 4, 2, 200, DType::f32, br),
      make(1, 1000, 17, 2, 1, 64, DType::f16, br),  // most rows see no key
      make(2, 100, 257, 6, 3, 80, DType::bf16, tl, true),
      make(1, 1, 1000, 8, 1, 128, DType::f32, tl),
      make(3, 64, 64, 2, 2, 1, DType::bf16, none, true),
      make(1, 17, 1, 2, 2, 3, DType::f32, tl),
  };
  if (device == DeviceKind::cuda) {
    // Several key blocks of the 16-bit tensor-core kernel, on its aligned (cp.async) path,
    // small enough for --quick: head dims 128, 256 and 512 (two output slices).
    cases.push_back(make(1, 40, 200, 2, 1, 128, DType::f16, tl));
    cases.push_back(make(1, 33, 150, 1, 1, 256, DType::bf16, br));
    cases.push_back(make(1, 20, 70, 1, 1, 512, DType::f16, none));
    // cuda_wgmma's kernels whose Q·Kᵀ stops short of the bucket (40 of 64, 80 of
    // 128, 160 of 192) and whose v has a narrower bucket (192 and 128).
    cases.push_back(make(1, 33, 130, 1, 1, 40, DType::f16, br));
    cases.push_back(make(1, 40, 150, 2, 1, 80, DType::bf16, none));
    cases.push_back(make(1, 20, 100, 1, 1, 160, DType::bf16, tl));
    // cuda_f16x3's widest bucket (8 warps a block) with its keys split over blocks.
    cases.push_back(make(1, 40, 300, 2, 1, 1000, DType::f32, tl));
    // Strided views TMA can describe (16-byte aligned rows), for cuda_wgmma.
    cases.push_back(make(2, 100, 257, 6, 3, 80, DType::bf16, tl, true, 8));
    cases.push_back(make(1, 129, 200, 2, 1, 1024, DType::f16, br));
    cases.push_back(make(1, 4097, 4097, 2, 2, 64, DType::bf16, tl, true));
    cases.push_back(make(1, 300, 4097, 4, 1, 1024, DType::f32, none));
    cases.push_back(make(1, 4097, 4097, 1, 1, 200, DType::f32, br, true));
  }
  return cases;
}

template <typename T>
T pick(std::mt19937_64& rng, const std::vector<T>& items) {
  return items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)];
}

bool affordable(const harness::Case& c, DeviceKind device, bool quick) {
  const harness::Shape& s = c.shape;
  if (quick && harness::flop_count(c) > kQuickFlopLimit) return false;
  if (device == DeviceKind::cpu) return harness::flop_count(c) <= kCpuFlopLimit;
  const double sampled_rows = std::min(s.seqlen_q, 256);
  const double reference = 4.0 * s.batch * s.heads_q * sampled_rows * s.seqlen_k * s.head_dim;
  const double elements =
      double(s.batch) * (s.seqlen_q * s.heads_q + s.seqlen_k * s.heads_kv) * s.head_dim;
  return reference <= kGpuReferenceFlopLimit && elements <= kGpuElementLimit;
}

harness::Case random_case(std::mt19937_64& rng, DeviceKind device, bool quick) {
  std::vector<int> seqlens = {1, 2, 5, 16, 17, 31, 33, 64, 65, 100, 127, 128, 129, 256, 257, 500, 1000};
  std::vector<int> head_dims = {1, 2, 3, 4, 8, 16, 32, 40, 64, 72, 80, 96, 128, 200, 256};
  if (device == DeviceKind::cuda) {
    seqlens.insert(seqlens.end(), {2048, 4097});
    head_dims.insert(head_dims.end(), {512, 1024});
  }
  const std::vector<std::pair<int, int>> heads = {{1, 1}, {2, 2}, {3, 3}, {4, 1},
                                                  {4, 2}, {6, 3}, {8, 2}, {8, 8}};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (;;) {
    const auto [hq, hkv] = pick(rng, heads);
    const int seqlen_q = pick(rng, seqlens);
    const int seqlen_k = unit(rng) < 0.5 ? seqlen_q : pick(rng, seqlens);
    harness::Case c = make(pick(rng, std::vector<int>{1, 2, 3}), seqlen_q, seqlen_k, hq, hkv,
                           pick(rng, head_dims), pick(rng, std::vector<DType>{DType::f32, DType::f16, DType::bf16}),
                           pick(rng, std::vector<Mask>{Mask::none, Mask::causal_top_left,
                                                       Mask::causal_bottom_right}),
                           unit(rng) < 0.3, unit(rng) < 0.5 ? 3 : 8);
    if (unit(rng) < 0.25) c.scale = float(0.03 * std::pow(40.0, unit(rng)));  // 0.03 to 1.2
    if (unit(rng) < 0.2) c.input_std = pick(rng, std::vector<float>{0.25f, 3.0f});
    if (affordable(c, device, quick)) return c;
  }
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: distinct seeds per case
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

int default_check_cases(bool quick) { return quick ? 12 : 100; }

std::vector<CheckCase> check_cases(DeviceKind device, int count, uint64_t seed, bool quick) {
  std::vector<harness::Case> specs;
  for (const harness::Case& c : awkward_cases(device))
    if (affordable(c, device, quick)) specs.push_back(c);
  std::mt19937_64 rng(seed);
  specs.resize(std::min<size_t>(specs.size(), size_t(count)));
  while (int(specs.size()) < count) specs.push_back(random_case(rng, device, quick));
  std::vector<CheckCase> cases;
  for (size_t i = 0; i < specs.size(); ++i) cases.push_back({specs[i], mix(seed + i)});
  return cases;
}

}  // namespace flashattn::cli
