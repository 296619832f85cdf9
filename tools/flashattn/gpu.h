// The CLI's few direct CUDA runtime calls, compiled with or without CUDA
// (gpu_cuda.cpp / gpu_none.cpp): without CUDA every function throws, and
// callers only reach them once a CUDA device was found.
#pragma once

#include <functional>
#include <string>

namespace flashattn::cli::gpu {

// cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3".
std::string device_name(int device);

// Milliseconds between CUDA events recorded on the default stream before and
// after work() enqueues its kernels; waits for the second event.
double time_ms(int device, const std::function<void()>& work);

}  // namespace flashattn::cli::gpu
