// Device queries for the host API.
#include <vector>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/common/check.h"

namespace flashattn::cuda {

// Asked on every call, and fixed while the process runs (the visible devices
// are set when CUDA initialises), so they are queried once.
int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error, just none
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {

struct DeviceProperties {
  int compute_capability;  // major·10 + minor
  int multiprocessors;
  int shared_memory_per_block;  // bytes, with the kernel's opt-in
  int l2_cache_bytes;
};

const DeviceProperties& properties(int device_index) {
  static const std::vector<DeviceProperties> devices = [] {
    std::vector<DeviceProperties> all(device_count());
    for (int i = 0; i < int(all.size()); ++i) {
      int major = 0, minor = 0;
      FLASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i));
      FLASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i));
      FLASHATTN_CUDA_CHECK(
          cudaDeviceGetAttribute(&all[i].multiprocessors, cudaDevAttrMultiProcessorCount, i));
      FLASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&all[i].shared_memory_per_block,
                                                  cudaDevAttrMaxSharedMemoryPerBlockOptin, i));
      FLASHATTN_CUDA_CHECK(
          cudaDeviceGetAttribute(&all[i].l2_cache_bytes, cudaDevAttrL2CacheSize, i));
      all[i].compute_capability = major * 10 + minor;
    }
    return all;
  }();
  if (device_index < 0 || device_index >= int(devices.size()))
    fail(Status::invalid_argument, "cuda device index ", device_index, " is out of range [0, ",
         devices.size(), ")");
  return devices[device_index];
}

}  // namespace

int compute_capability(int device_index) { return properties(device_index).compute_capability; }

int multiprocessors(int device_index) { return properties(device_index).multiprocessors; }

int shared_memory_per_block(int device_index) {
  return properties(device_index).shared_memory_per_block;
}

int l2_cache_bytes(int device_index) { return properties(device_index).l2_cache_bytes; }

void copy_to_host(std::initializer_list<HostCopy> copies, int device_index, void* stream) {
  DeviceGuard device(device_index);
  const auto s = static_cast<cudaStream_t>(stream);
  for (const HostCopy& c : copies)
    FLASHATTN_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToHost, s));
  FLASHATTN_CUDA_CHECK(cudaStreamSynchronize(s));
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
