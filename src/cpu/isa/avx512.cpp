// The CPU kernels for AVX-512 (F, BW, DQ, VL): 16 lanes; 6 × 4 vectors of
// accumulators, 4 of B and a broadcast take 29 of the 32 registers.
#include "cpu/simd/entry.h"
#include "cpu/simd/prelude.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2")
#define FLASHATTN_CPU_LANES 16
namespace flashattn::cpu::avx512 {
constexpr int kGemmRows = 6, kGemmCols = 4;
#include "cpu/simd/kernels.h"
}  // namespace flashattn::cpu::avx512
#pragma GCC pop_options
#endif
