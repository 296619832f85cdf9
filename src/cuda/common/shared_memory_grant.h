// Dynamic shared memory beyond the default 48 KB, granted to a kernel.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/check.h"

namespace flashattn::cuda {

// Grants `kernel` `bytes` of dynamic shared memory on the current device. The
// runtime is asked once per kernel and device, and again only for more than it
// granted before, not on every launch: the attribute call is a driver call on
// the host's path to each launch, which a short kernel (a decode step) cannot
// hide.
inline void grant_shared_memory(const void* kernel, int bytes) {
  int device = 0;
  FLASHATTN_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> granted;  // (kernel, device) → bytes
  const std::lock_guard<std::mutex> lock(mutex);
  int& known = granted[{kernel, device}];
  if (bytes <= known) return;
  FLASHATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  known = bytes;
}

template <typename... Params>
void grant_shared_memory(void (*kernel)(Params...), int bytes) {
  grant_shared_memory(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace flashattn::cuda
