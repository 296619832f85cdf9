// CUDA error handling: every runtime call and every launch goes through check(),
// which turns a failure into flashattn::Error(cuda_error) naming the call.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace flashattn::cuda {

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    fail(Status::cuda_error, call, " failed: ", cudaGetErrorName(status), " (",
         cudaGetErrorString(status), ")");
}

// After a <<<...>>> launch: reports bad configurations and earlier async errors.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Makes `index` the current device for its lifetime, restoring the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace flashattn::cuda

#define FLASHATTN_CUDA_CHECK(call) ::flashattn::cuda::check((call), #call)
