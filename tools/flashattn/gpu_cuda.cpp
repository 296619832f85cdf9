#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "gpu.h"

namespace flashattn::cli::gpu {
namespace {

// A CUDA event destroyed with its scope, so a throwing work() leaks nothing.
class Event {
 public:
  Event() { FLASHATTN_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::string device_name(int device) {
  cudaDeviceProp prop{};
  FLASHATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

double time_ms(int device, const std::function<void()>& work) {
  cuda::DeviceGuard guard(device);
  Event start, stop;
  FLASHATTN_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
  work();
  FLASHATTN_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
  FLASHATTN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  FLASHATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace flashattn::cli::gpu
