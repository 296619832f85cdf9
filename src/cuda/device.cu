// Device queries for the host API.
#include "cuda/backends.h"
#include "cuda/common/check.h"

namespace flashattn::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error, just none
    return 0;
  }
  return count;
}

int compute_capability(int device_index) {
  int major = 0, minor = 0;
  FLASHATTN_CUDA_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index));
  FLASHATTN_CUDA_CHECK(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index));
  return major * 10 + minor;
}

void require_device_pointer(const void* ptr, int device_index, const char* name) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    fail(Status::invalid_argument, name, ": pointer is not known to CUDA");
  }
  const bool readable = attr.type == cudaMemoryTypeManaged ||
                        (attr.type == cudaMemoryTypeDevice && attr.device == device_index) ||
                        (attr.type == cudaMemoryTypeHost && attr.devicePointer != nullptr);
  require(readable, name, ": device is cuda:", device_index,
          " but the pointer is not memory that device can access");
}

}  // namespace flashattn::cuda
