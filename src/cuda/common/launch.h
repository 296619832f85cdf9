// Kernel launches with sm_90's launch attributes, for the kernels that take them:
//   - a cluster of a tile's key splits along the grid's y (KeySplit::in_cluster,
//     merged in the cluster by common/cluster_merge.cuh);
//   - a programmatic dependent launch: the kernel's blocks are scheduled while
//     the kernel before it on the stream still runs (once every block of that
//     one has started or said so in griddepcontrol.launch_dependents), so the
//     launch's latency passes under that kernel's work. Such a kernel must run
//     griddepcontrol.wait before it reads what the kernel before wrote, or
//     writes anything that kernel reads.
// Both need the sm_90a code: a build without it runs other code (sm_80's, or
// its PTX), in which the kernels neither wait nor merge in clusters.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda/common/check.h"
#include "cuda/device.h"

namespace flashattn::cuda {

// Whether kernels on the device run their sm_90a code, which waits in
// griddepcontrol.wait and merges in clusters.
inline bool runs_sm90a_code(int device_index) {
#ifdef FLASHATTN_HAS_SM90A
  return compute_capability(device_index) == 90;
#else
  (void)device_index;
  return false;
#endif
}

class KernelLaunch {
 public:
  KernelLaunch(dim3 grid, dim3 block, int smem_bytes, cudaStream_t stream) {
    config_.gridDim = grid;
    config_.blockDim = block;
    config_.dynamicSmemBytes = size_t(smem_bytes);
    config_.stream = stream;
  }

  // The grid's y blocks (one tile's key splits) as one cluster.
  KernelLaunch& cluster_y(int blocks) {
    cudaLaunchAttribute& a = attrs_[count_++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 1;
    a.val.clusterDim.y = unsigned(blocks);
    a.val.clusterDim.z = 1;
    return *this;
  }

  // A programmatic dependent launch where the device runs the sm_90a code
  // (runs_sm90a_code); an ordinary one elsewhere.
  KernelLaunch& early_where(bool sm90a) {
    if (sm90a) {
      cudaLaunchAttribute& a = attrs_[count_++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
    return *this;
  }

  const cudaLaunchConfig_t& config() {
    config_.attrs = attrs_;
    config_.numAttrs = unsigned(count_);
    return config_;
  }

  template <typename... Params, typename... Args>
  void operator()(void (*kernel)(Params...), const char* name, Args&&... args) {
    FLASHATTN_CUDA_CHECK(cudaLaunchKernelEx(&config(), kernel, std::forward<Args>(args)...));
    check_launch(name);
  }

 private:
  cudaLaunchConfig_t config_{};
  cudaLaunchAttribute attrs_[2]{};
  int count_ = 0;
};

// Blocks of `kernel` that clusters of `splits` blocks (one tile's key splits)
// keep resident on the device at once: 0 without sm_90a code or where no such
// cluster fits. Asked of the runtime once per kernel, device and size.
template <typename Kernel>
int cluster_slots(Kernel kernel, int splits, int threads, int smem_bytes, int device_index) {
  if (!runs_sm90a_code(device_index)) return 0;
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> known;  // (kernel, device, splits) → slots
  const std::tuple<const void*, int, int> key{reinterpret_cast<const void*>(kernel), device_index,
                                              splits};
  const std::lock_guard<std::mutex> lock(mutex);
  const auto at = known.find(key);
  if (at != known.end()) return at->second;
  // Clusters of more than 8 blocks are sm_90's non-portable sizes, taken on request.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
    (void)cudaGetLastError();
  KernelLaunch launch(dim3(1, unsigned(splits)), dim3(unsigned(threads)), smem_bytes, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.cluster_y(splits).config()) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // a size the device does not take: no cluster
    clusters = 0;
  }
  return known[key] = clusters * splits;
}

}  // namespace flashattn::cuda
