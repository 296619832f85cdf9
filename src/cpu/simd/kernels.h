// The CPU kernels of one instruction set, from one source: the unit that
// includes this (cpu/isa/*.cpp) has set the target, FLASHATTN_CPU_LANES,
// kGemmRows and kGemmCols, and opened the set's namespace. No include guard.

#include "cpu/simd/vec.h"
#include "cpu/simd/gemm.h"
#include "cpu/simd/convert.h"
#include "cpu/simd/score.h"
#include "cpu/simd/key_runs.h"
#include "cpu/simd/forward_tiles.h"
#include "cpu/simd/few_rows.h"
#include "cpu/simd/forward.h"
#include "cpu/simd/backward.h"
#include "cpu/simd/backward_fused.h"
#include "cpu/simd/backward_schedule.h"

void forward_pass(const AttnParams& p) { forward::run(p); }
void backward_pass(const BwdParams& p) { backward::run(p); }
