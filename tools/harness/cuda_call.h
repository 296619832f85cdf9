// CUDA runtime calls in the tools (the harness's device buffers, the CLI's
// timer, the cuBLAS baseline): a failure becomes flashattn::Error naming the
// call. The library's kernels have their own (src/cuda/common/check.h): tools
// use the public headers and src/core/ only.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace flashattn::tools {

inline void cuda_call(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    fail(Status::cuda_error, call, " failed: ", cudaGetErrorName(status), " (",
         cudaGetErrorString(status), ")");
}

// `device` is the current device until the scope ends; then the previous one.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    cuda_call(cudaGetDevice(&previous_), "cudaGetDevice");
    cuda_call(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace flashattn::tools

#define FLASHATTN_TOOLS_CUDA(call) ::flashattn::tools::cuda_call((call), #call)
