// The merge of key splits (combine.h). Up to kSplitLanes splits, one thread
// per 4 output columns of a query row walks them all: with 2 to 8 splits, lanes
// that each took one split sat idle and multiplied the index arithmetic (18.7 µs
// for 2 splits of 8,000 rows at head dim 64, 3.3 µs this way). Past that,
// kSplitLanes threads share a column group, each taking every kSplitLanes-th
// split, combined by shuffles, so that a merge of many splits waits on few loads
// in turn (one thread walking every split waited on each: 6–14 µs for 16–128
// splits). The indices divide by host-set FastDivisors, which is why the grid
// must stay under 2^31 threads (merge_fits).
// On sm_90 the merge is a programmatic dependent launch (common/launch.h): its
// blocks wait in griddepcontrol.wait until the splits' kernel has finished and
// its writes are visible, and the launch's latency passes under that kernel.
#include <cmath>

#include "core/softmax.h"
#include "cuda/common/check.h"
#include "cuda/common/combine.h"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/element.cuh"
#include "cuda/common/fast_divisor.h"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/launch.h"
#include "cuda/device.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSplitLanes = 8;  // consecutive lanes of a warp, past kSplitLanes splits

// The lanes that share a column group for `splits` splits.
int merge_lanes(int splits) { return splits > kSplitLanes ? kSplitLanes : 1; }

// The merge's threads: lanes for every 4 output columns of every query row.
int64_t merge_threads(const Sizes& s, int splits) {
  return int64_t(s.batch) * s.heads_q * s.seqlen_q * ((s.head_dim_v + 3) / 4) * merge_lanes(splits);
}

// A column group's flat index: its row (b, hq, i) and first column.
struct MergeDivisors {
  FastDivisor column_groups;  // per row: ⌈head_dim_v / 4⌉
  FastDivisor seqlen_q;
  FastDivisor heads_q;
};

// Over the Lanes lanes of this thread's group.
template <int Lanes>
__device__ __forceinline__ float group_lse_max(float x) {
#pragma unroll
  for (int width = Lanes / 2; width > 0; width /= 2)
    x = lse_max(x, __shfl_xor_sync(0xffffffffu, x, width));
  return x;
}
template <int Lanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int width = Lanes / 2; width > 0; width /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, width);
  return x;
}

// Lanes: 1 or kSplitLanes threads per column group. vec4: head_dim_v % 4 == 0,
// so that partial columns move as float4, and out's rows (fp32) 16-byte
// aligned, so that output columns do too.
template <typename T, int Lanes>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const AttnParams p, const KeySplit split, const MergeDivisors div, bool vec4) {
  wait_for_previous_grid();  // the splits' partials
  const Sizes& s = p.sizes;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int index = int(blockIdx.x) * kThreads + int(threadIdx.x);  // < 2^31: merge_fits
  const int lane = index % Lanes;
  const int column_group = index / Lanes;
  // Threads past the last row still take part in their group's shuffles.
  const bool active = column_group < rows * div.column_groups.divisor;
  int group_in_row = 0;
  const int row = active ? div.column_groups.divmod(column_group, group_in_row) : 0;  // (b, hq, i)
  const int c0 = 4 * group_in_row;
  // Weights relative to the largest split; all zero for a row that saw no key,
  // NaN for a row with a NaN split.
  float lse_top = -INFINITY;
#pragma unroll 4
  for (int j = lane; j < split.count; j += Lanes)
    lse_top = lse_max(lse_top, split.lse[j * rows + row]);
  lse_top = group_lse_max<Lanes>(lse_top);
  const int cols = active ? min(4, s.head_dim_v - c0) : 0;
  float o[4] = {}, sum = 0.0f;
#pragma unroll 4
  for (int j = lane; j < split.count; j += Lanes) {
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
  sum = group_sum<Lanes>(sum);
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = group_sum<Lanes>(o[e]);
  if (!active || lane != 0) return;
  const bool empty = lse_top == -INFINITY;
  const FinishedRow<float> merged = finish_row(lse_top, sum, empty);
  int i = 0, hq = 0;
  const int b = div.heads_q.divmod(div.seqlen_q.divmod(row, i), hq);
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

bool merge_fits(const Sizes& s, int splits) {
  return merge_threads(s, splits) + kThreads <= int64_t(INT32_MAX);
}

void merge_key_splits(const AttnParams& p, const KeySplit& split) {
  const Sizes& s = p.sizes;
  const int64_t threads = merge_threads(s, split.count);
  const MergeDivisors div{FastDivisor((s.head_dim_v + 3) / 4), FastDivisor(s.seqlen_q),
                          FastDivisor(s.heads_q)};
  const bool vec4 = s.head_dim_v % 4 == 0 &&
                    (p.dtype != DType::f32 || rows_16b_aligned(p.o, sizeof(float)));
  KernelLaunch launch(dim3(unsigned((threads + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                      static_cast<cudaStream_t>(p.stream));
  launch.early_where(runs_sm90a_code(p.device_index));
  with_element_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (merge_lanes(split.count) == 1)
      launch(merge_kernel<T, 1>, "merge_kernel", p, split, div, vec4);
    else
      launch(merge_kernel<T, kSplitLanes>, "merge_kernel", p, split, div, vec4);
  });
}

}  // namespace flashattn::cuda
