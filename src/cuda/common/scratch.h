// Scratch device memory for one call, stream-ordered: taken from a per-device
// pool that keeps what it has (release threshold: never), so after the first
// calls of a given size no memory is requested from the driver, and work on
// different streams never shares a buffer.
#pragma once

#include <cstddef>

namespace flashattn::cuda {

class Scratch {
 public:
  // bytes on device `device_index`, usable by work queued on `stream` from now
  // until the Scratch is destroyed (the release is queued on the same stream).
  Scratch(size_t bytes, int device_index, void* stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  void* stream_ = nullptr;
};

}  // namespace flashattn::cuda
