// The CPU kernels for the compiler's default target (SSE2 on x86-64, NEON on
// AArch64): 4 lanes; 4 × 3 vectors of accumulators fit 16 registers.
#include "cpu/simd/entry.h"
#include "cpu/simd/prelude.h"

#define FLASHATTN_CPU_LANES 4
namespace flashattn::cpu::baseline {
constexpr int kGemmRows = 4, kGemmCols = 3;
#include "cpu/simd/kernels.h"
}  // namespace flashattn::cpu::baseline
