#include "cuda/common/scratch.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "cuda/device.h"
#include "cuda/common/check.h"

namespace flashattn::cuda {
namespace {

// The library's own pool per device, created on first use.
cudaMemPool_t pool(int device_index) {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools(device_count(), nullptr);
  const std::lock_guard<std::mutex> lock(mutex);
  cudaMemPool_t& p = pools.at(device_index);
  if (p == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_index;
    FLASHATTN_CUDA_CHECK(cudaMemPoolCreate(&p, &props));
    uint64_t keep_all = UINT64_MAX;
    FLASHATTN_CUDA_CHECK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  return p;
}

}  // namespace

Scratch::Scratch(size_t bytes, int device_index, void* stream) : stream_(stream) {
  FLASHATTN_CUDA_CHECK(cudaMallocFromPoolAsync(&data_, bytes, pool(device_index),
                                               static_cast<cudaStream_t>(stream)));
}

// Queued after the work that uses the buffer; an error here would also have
// failed that work, which reports it.
Scratch::~Scratch() { cudaFreeAsync(data_, static_cast<cudaStream_t>(stream_)); }

}  // namespace flashattn::cuda
