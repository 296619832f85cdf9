#include <cuda_runtime.h>

#include "cuda_call.h"
#include "gpu.h"

namespace flashattn::cli::gpu {
namespace {

// A CUDA event destroyed with its scope, so a throwing work() leaks nothing.
class Event {
 public:
  Event() { FLASHATTN_TOOLS_CUDA(cudaEventCreate(&event_)); }
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
  FLASHATTN_TOOLS_CUDA(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

double time_ms(int device, const std::function<void()>& work) {
  tools::CurrentDevice guard(device);
  Event start, stop;
  FLASHATTN_TOOLS_CUDA(cudaEventRecord(start.get(), nullptr));
  work();
  FLASHATTN_TOOLS_CUDA(cudaEventRecord(stop.get(), nullptr));
  FLASHATTN_TOOLS_CUDA(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  FLASHATTN_TOOLS_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace flashattn::cli::gpu
