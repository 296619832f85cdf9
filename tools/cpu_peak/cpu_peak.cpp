// flashattn-cpu-peak: the fp32 multiply-add rate of this CPU's vector units,
// measured, on one thread and on all: the ceiling the CPU benchmark
// (bench/cpu_suite.py) sets each point against. A loop of independent fused
// multiply-adds on registers (no memory), per instruction set the CPU runs:
//   flashattn-cpu-peak [threads]   ->  one line per set: "avx512 1 thread 190.2 GFLOP/s ..."
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr long kSteps = 20'000'000;
// Independent chains: enough to cover a multiply-add's latency (4 cycles) on
// two pipes, with two registers left for the operands (16 registers below
// AVX-512, 32 with it).

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V4 __attribute__((vector_size(16)));

// Returns a value that depends on every chain, so none is optimised away.
template <typename Vec, int kChains>
inline __attribute__((always_inline)) float run(float seed) {
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + seed * float(c + 1);
  const Vec a = Vec{} + 0.999999f, b = Vec{} + 1e-7f;
  for (long s = 0; s < kSteps; ++s)
#pragma GCC unroll 32
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0];
  return sum;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"), noinline)) float fma512(float seed) { return run<V16, 24>(seed); }
__attribute__((target("avx2,fma"), noinline)) float fma256(float seed) { return run<V8, 12>(seed); }
#endif
__attribute__((noinline)) float fma128(float seed) { return run<V4, 12>(seed); }

struct Set {
  const char* name;
  bool supported;
  float (*kernel)(float);
  int lanes, chains;
};

double gflops(const Set& set, int threads) {
  std::vector<std::thread> pool;
  std::atomic<float> sink{0};
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { sink = sink + set.kernel(float(t + 1)); });
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * set.lanes * set.chains * double(kSteps) * threads / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : int(std::thread::hardware_concurrency());
  std::vector<Set> sets;
#if defined(__x86_64__)
  __builtin_cpu_init();
  sets.push_back({"avx512", bool(__builtin_cpu_supports("avx512f")), fma512, 16, 24});
  sets.push_back({"avx2", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), fma256, 8, 12});
#endif
  sets.push_back({"baseline", true, fma128, 4, 12});
  for (const Set& set : sets) {
    if (!set.supported) continue;
    gflops(set, 1);  // warm up (clocks settle)
    std::printf("%s 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n", set.name, gflops(set, 1),
                threads, gflops(set, threads));
  }
}
