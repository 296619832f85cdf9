// Asynchronous global → shared copies (cp.async, sm_80+): a load is issued, the
// thread goes on computing, and cp_async_wait<N>() later blocks until all but
// the N most recently committed groups have landed. A copy with valid = false
// writes zeros (src-size 0 reads nothing), so ragged tiles need no second pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.h"

namespace flashattn::cuda {

// Whether every row of t starts 16-byte aligned (base pointer and all strides),
// so its rows can be copied in 16-byte chunks.
inline bool rows_16b_aligned(const TensorRef& t, size_t element_bytes) {
  const size_t per_chunk = 16 / element_bytes;
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.batch_stride % per_chunk == 0 &&
         t.row_stride % per_chunk == 0 && t.head_stride % per_chunk == 0;
}

// Copies the first src_bytes (0..16) of gmem and zero-fills the rest of the
// 16-byte chunk; gmem must be 16-byte aligned even when src_bytes < 16.
__device__ __forceinline__ void cp_async_16_partial(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}

// As cp_async_16 to a shared-memory address, through the ignore-src predicate:
// no source-size arithmetic per copy, for loops that issue many of them.
__device__ __forceinline__ void cp_async_16_or_zeros(uint32_t smem, const void* gmem, bool zeros) {
  asm volatile(
      "{\n .reg .pred z;\n setp.ne.b32 z, %2, 0;\n"
      " cp.async.cg.shared.global [%0], [%1], 16, z;\n}" ::"r"(smem),
      "l"(gmem), "r"(int(zeros)));
}

// A whole 16-byte chunk to a shared-memory address: no predicate, for copies
// known to lie inside their tensor.
__device__ __forceinline__ void cp_async_16_whole(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16_partial(smem, gmem, valid ? 16 : 0);
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

}  // namespace flashattn::cuda
