#include "api/device_check.h"

#include "core/error.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

// The lowest compute capability our CUDA kernels are built for.
constexpr int kMinCapability = 80;

}  // namespace

void check_cuda_device(int index, std::initializer_list<DeviceTensor> tensors) {
  const int count = cuda::device_count();
  if (count == 0) fail(Status::unsupported, "q: device is cuda but no CUDA device is available");
  require(index >= 0 && index < count, "q: cuda device index ", index, " is out of range [0, ",
          count, ")");
  const int cc = cuda::compute_capability(index);
  if (cc < kMinCapability)
    fail(Status::unsupported, "q: cuda device ", index, " has compute capability ", cc / 10, ".",
         cc % 10, "; flashattn's CUDA kernels need 8.0 or newer");
  for (const DeviceTensor& t : tensors)
    if (t.has_elements) cuda::require_device_pointer(t.data, index, t.name);
}

}  // namespace flashattn
