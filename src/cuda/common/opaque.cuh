// Keeping loop-invariant address arithmetic out of registers: helpers that hide a
// value's origin from the compiler.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

// Hides a value's origin from the compiler. Address arithmetic on values it can
// see as loop-invariant gets hoisted out of the attention loop and then held in
// registers for the whole loop (dozens of them, enough to cause spills), when
// recomputing it per use costs an integer op or two beside the tensor cores.
template <typename T>
__device__ __forceinline__ void opaque(const T*& ptr) { asm volatile("" : "+l"(ptr)); }
__device__ __forceinline__ void opaque(int64_t& value) { asm volatile("" : "+l"(value)); }

// threadIdx.x, read afresh for the same reason: values derived from it (shared-
// memory addresses) are recomputed where used, not held through the loop.
__device__ __forceinline__ int thread_index() {
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return int(tid);
}

}  // namespace flashattn::cuda
