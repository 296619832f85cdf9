// The CPU kernels for AVX2 with FMA and F16C: 8 lanes; 4 × 3 vectors of
// accumulators, 3 of B and a broadcast fill the 16 registers.
#include "cpu/simd/entry.h"
#include "cpu/simd/prelude.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#define FLASHATTN_CPU_LANES 8
namespace flashattn::cpu::avx2 {
constexpr int kGemmRows = 4, kGemmCols = 3;
#include "cpu/simd/kernels.h"
}  // namespace flashattn::cpu::avx2
#pragma GCC pop_options
#endif
