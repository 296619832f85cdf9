// Device queries for the host API: plain C++ declarations (no CUDA headers), built
// from device.cu with CUDA, else from unavailable.cpp (no devices).
#pragma once

#include <initializer_list>

namespace flashattn::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no GPU.
int device_count();

// Compute capability as major·10 + minor; throws naming the device on failure.
int compute_capability(int device_index);

// Number of streaming multiprocessors.
int multiprocessors(int device_index);

// Most shared memory one block may use, in bytes (with the kernel's opt-in).
int shared_memory_per_block(int device_index);

// Size of the L2 cache, in bytes.
int l2_cache_bytes(int device_index);

// Device memory to copy to the host: `bytes` at src into dst.
struct HostCopy {
  void* dst;
  const void* src;
  unsigned long bytes;
};

// Makes every copy, in order on `stream` (a cudaStream_t), and waits for them once.
void copy_to_host(std::initializer_list<HostCopy> copies, int device_index, void* stream);

// Throws Error(invalid_argument) naming `name` unless ptr is device memory that
// device `device_index` can read (device, managed or mapped host memory).
void require_device_pointer(const void* ptr, int device_index, const char* name);

}  // namespace flashattn::cuda
