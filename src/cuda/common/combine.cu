// The merge of key splits (combine.h): kSplitLanes threads per 4 output
// columns of a query row, each taking every kSplitLanes-th split and the group
// combining them by shuffles, so that even a few rows of wide heads spread over
// the whole GPU and a merge of many splits waits on few loads in turn (one
// thread walking every split waited on each: 6–14 µs for 16–128 splits).
// On sm_90 the merge is a programmatic dependent launch: its blocks are
// scheduled once every block of the kernel before it has started (or said so,
// griddepcontrol.launch_dependents) and wait in griddepcontrol.wait until that
// kernel has finished and its writes are visible, so the launch's latency
// passes under the splits' work instead of after it.
#include <cmath>

#include "core/softmax.h"
#include "cuda/common/check.h"
#include "cuda/common/combine.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/element.cuh"
#include "cuda/device.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSplitLanes = 8;  // consecutive lanes of a warp

// Over the kSplitLanes lanes of this thread's group.
__device__ __forceinline__ float group_lse_max(float x) {
#pragma unroll
  for (int width = kSplitLanes / 2; width > 0; width /= 2)
    x = lse_max(x, __shfl_xor_sync(0xffffffffu, x, width));
  return x;
}
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int width = kSplitLanes / 2; width > 0; width /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, width);
  return x;
}

// vec4: head_dim_v % 4 == 0, so that partial columns move as float4, and out's
// rows (fp32) 16-byte aligned, so that output columns do too.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const AttnParams p, const KeySplit split, bool vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the splits' partials
#endif
  const Sizes& s = p.sizes;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int groups = (s.head_dim_v + 3) / 4;
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int lane = int(index % kSplitLanes);
  const int64_t column_group = index / kSplitLanes;
  // Threads past the last row still take part in their group's shuffles.
  const bool active = column_group < rows * groups;
  const int64_t row = active ? column_group / groups : 0;  // (b, hq, i)
  const int c0 = 4 * int(column_group % groups);
  // Weights relative to the largest split; all zero for a row that saw no key,
  // NaN for a row with a NaN split.
  float lse_top = -INFINITY;
#pragma unroll 4
  for (int j = lane; j < split.count; j += kSplitLanes)
    lse_top = lse_max(lse_top, split.lse[j * rows + row]);
  lse_top = group_lse_max(lse_top);
  const int cols = active ? min(4, s.head_dim_v - c0) : 0;
  float o[4] = {}, sum = 0.0f;
#pragma unroll 4
  for (int j = lane; j < split.count; j += kSplitLanes) {
    const float weight = partial_weight(split.lse[j * rows + row], lse_top);
    sum += weight;
    const float* part = split.out + (j * rows + row) * s.head_dim_v + c0;
    if (vec4 && cols == 4) {
      const float4 x = *reinterpret_cast<const float4*>(part);
      o[0] = fmaf(weight, x.x, o[0]), o[1] = fmaf(weight, x.y, o[1]);
      o[2] = fmaf(weight, x.z, o[2]), o[3] = fmaf(weight, x.w, o[3]);
    } else {
      for (int e = 0; e < cols; ++e) o[e] = fmaf(weight, part[e], o[e]);
    }
  }
  sum = group_sum(sum);
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = group_sum(o[e]);
  if (!active || lane != 0) return;
  const bool empty = lse_top == -INFINITY;
  const FinishedRow<float> merged = finish_row(lse_top, sum, empty);
  const int i = int(row % s.seqlen_q), hq = int(row / s.seqlen_q % s.heads_q);
  const int b = int(row / (int64_t(s.seqlen_q) * s.heads_q));
  T* out = static_cast<T*>(p.o.data) + b * p.o.batch_stride + hq * p.o.head_stride +
           int64_t(i) * p.o.row_stride + c0;
  if constexpr (sizeof(T) == sizeof(float)) {
    if (vec4 && cols == 4) {
      *reinterpret_cast<float4*>(out) =
          make_float4(merged.out(o[0]), merged.out(o[1]), merged.out(o[2]), merged.out(o[3]));
      if (p.softmax.lse && c0 == 0) p.softmax.lse[row] = merged.lse;
      return;
    }
  }
  for (int e = 0; e < cols; ++e) out[e] = from_float<T>(merged.out(o[e]));
  if (p.softmax.lse && c0 == 0) p.softmax.lse[row] = merged.lse;
}

}  // namespace

void merge_key_splits(const AttnParams& p, const KeySplit& split) {
  const Sizes& s = p.sizes;
  const int64_t threads =
      int64_t(s.batch) * s.heads_q * s.seqlen_q * ((s.head_dim_v + 3) / 4) * kSplitLanes;
  const bool vec4 = s.head_dim_v % 4 == 0 &&
                    (p.dtype != DType::f32 || rows_16b_aligned(p.o, sizeof(float)));
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned((threads + kThreads - 1) / kThreads));
  config.blockDim = dim3(kThreads);
  config.stream = static_cast<cudaStream_t>(p.stream);
  config.attrs = &early;
  config.numAttrs = compute_capability(p.device_index) >= 90 ? 1 : 0;
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FLASHATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<T>, p, split, vec4));
  });
  check_launch("merge_kernel");
}

}  // namespace flashattn::cuda
