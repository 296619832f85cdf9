// The CPU backend's entry points: each call runs the kernels of the widest
// instruction set the CPU has (cpu/isa.h), all compiled from cpu/simd/, on as
// many of the pool's threads as its work repays (cpu/call_workers.h), after
// mapping its outputs' pages (core/first_touch.h).
#include "core/first_touch.h"
#include "core/parallel.h"
#include "cpu/backends.h"
#include "cpu/call_workers.h"
#include "cpu/isa.h"
#include "cpu/simd/entry.h"

namespace flashattn::cpu {

void flash_forward(const AttnParams& p) {
  const WorkerCap cap(forward_workers(p));
  const Isa isa = active_isa();  // may refuse FLASHATTN_CPU_ISA: before any output is written
  touch_forward_outputs(p);
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx512: return avx512::forward_pass(p);
    case Isa::avx2: return avx2::forward_pass(p);
#endif
    default: return baseline::forward_pass(p);
  }
}

void flash_backward(const BwdParams& p) {
  const WorkerCap cap(backward_workers(p));
  const Isa isa = active_isa();  // may refuse FLASHATTN_CPU_ISA: before any output is written
  touch_backward_outputs(p);
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx512: return avx512::backward_pass(p);
    case Isa::avx2: return avx2::backward_pass(p);
#endif
    default: return baseline::backward_pass(p);
  }
}

}  // namespace flashattn::cpu
