// The checks that need the CUDA device itself: that it exists, is new enough,
// and holds every tensor's memory. Shared by forward() and backward().
#pragma once

#include <initializer_list>

#include "flashattn/flashattn.hpp"

namespace flashattn {

struct DeviceTensor {
  const char* name;
  const void* data;
  bool has_elements;  // one without elements is never touched: any pointer passes
};

// Throws Error naming the first tensor that is not on CUDA device `index`, or
// unsupported when that device cannot run flashattn's kernels.
void check_cuda_device(int index, std::initializer_list<DeviceTensor> tensors);

}  // namespace flashattn
