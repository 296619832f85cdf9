// Standard attention on a CUDA device, the GPU baseline of `flashattn bench`.
// Per batch:
//   S = Q·Kᵀ          cuBLAS, in the tensors' dtype with fp32 accumulation
//   P = softmax(S)    one block per row, fp32, applying scale and the mask
//   O = P·V           cuBLAS, as above
// S holds heads_q × seqlen_q × seqlen_k elements of the dtype: the N×N memory
// that flash attention avoids. Built from standard_cuda.cu with CUDA, else from
// standard_cuda_unavailable.cpp, whose constructor throws Status::unsupported.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/params.h"

namespace flashattn::baselines {

// cuBLAS's recommended workspace on Hopper; set explicitly so that the bytes
// standard attention holds are known exactly.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// Device bytes StandardCuda allocates: the score buffer for one batch plus the
// cuBLAS workspace.
inline size_t standard_cuda_bytes(const Sizes& s, DType dtype) {
  return size_t(s.heads_q) * size_t(s.seqlen_q) * size_t(s.seqlen_k) * dtype_size(dtype) +
         kCublasWorkspaceBytes;
}

// A device allocation failed; bytes() is what standard attention needed in all.
class DeviceOutOfMemory : public std::runtime_error {
 public:
  DeviceOutOfMemory(const std::string& message, size_t bytes)
      : std::runtime_error(message), bytes_(bytes) {}
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
};

class StandardCuda {
 public:
  // Allocates the score buffer and cuBLAS workspace on p's device. Throws
  // DeviceOutOfMemory when they do not fit, flashattn::Error for anything else.
  explicit StandardCuda(const AttnParams& p);
  ~StandardCuda();
  StandardCuda(const StandardCuda&) = delete;
  StandardCuda& operator=(const StandardCuda&) = delete;

  // Enqueues attention on p.stream; like flashattn::forward it does not wait.
  void run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flashattn::baselines
