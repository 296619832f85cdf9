#include <cuda_runtime.h>

#include <utility>

#include "cuda_call.h"
#include "device_memory.h"

namespace flashattn::harness {

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  tools::CurrentDevice guard(device);
  FLASHATTN_TOOLS_CUDA(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(device_, other.device_);
  return *this;
}

void DeviceBuffer::upload(const void* host) {
  FLASHATTN_TOOLS_CUDA(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host) const {
  FLASHATTN_TOOLS_CUDA(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost));
}

void device_synchronize(int device) {
  tools::CurrentDevice guard(device);
  FLASHATTN_TOOLS_CUDA(cudaDeviceSynchronize());
}

}  // namespace flashattn::harness
