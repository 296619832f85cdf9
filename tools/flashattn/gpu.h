// The CLI's few direct CUDA runtime calls, compiled with or without CUDA
// (gpu_cuda.cpp / gpu_none.cpp): without CUDA every function throws, and
// callers only reach them once a CUDA device was found.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace flashattn::cli::gpu {

// cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3".
std::string device_name(int device);

// Milliseconds between CUDA events recorded on the default stream before and
// after work() enqueues its kernels; waits for the second event.
double time_ms(int device, const std::function<void()>& work);

// High-water mark of the device's default memory pool (stream-ordered
// allocations, cudaMallocAsync), since the last reset_pool_peak.
void reset_pool_peak(int device);
size_t pool_peak_bytes(int device);

}  // namespace flashattn::cli::gpu
