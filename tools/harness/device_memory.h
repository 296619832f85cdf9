// Device memory for the harness, compiled with or without CUDA
// (device_memory_cuda.cpp / device_memory_none.cpp). Without CUDA every
// constructor throws, so callers need no #ifdefs.
#pragma once

#include <cstddef>

namespace flashattn::harness {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  void upload(const void* host);          // all bytes_
  void download(void* host) const;        // all bytes_

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

void device_synchronize(int device);

}  // namespace flashattn::harness
