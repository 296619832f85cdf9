// The merge of a tile's key splits inside their thread-block cluster
// (KeySplit::in_cluster, sm_90): every split leaves its finished rows and their
// lse in its own shared memory, and the block of cluster rank q merges the q-th
// share of the tile's elements from all of them, as common/combine.cu's merge
// kernel does from global memory, without that kernel's launch and without the
// partials' trip through global memory. Used by the decode kernel and
// cuda_f16x3's wide kernel.
#pragma once

#include <cmath>

#include <cooperative_groups.h>

#include "core/softmax.h"
#include "cuda/common/combine.h"

namespace flashattn::cuda {

// rows × cols merged elements; this split's rows lie row_stride floats apart
// in split_out, their lse in split_lse. write(r, col, out, lse) stores one
// merged element (lse is the row's, the same for every col). Every block of the
// cluster calls this; none leaves while another may still read its rows.
template <int kThreads, typename Write>
__device__ __forceinline__ void merge_in_cluster(int rows, int cols, int row_stride, int splits,
                                                 float* split_out, float* split_lse,
                                                 Write&& write) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int elements = rows * cols;
  const int share = (elements + splits - 1) / splits, rank = int(cluster.block_rank());
  const int end = min(elements, (rank + 1) * share);
  for (int e = rank * share + int(threadIdx.x); e < end; e += kThreads) {
    const int r = e / cols, col = e % cols;
    // Every split's lse and output element loaded at once (a remote load waits
    // about as long as a miss in L1, so one after another they would add up).
    float lse[kMaxClusterSplits], out[kMaxClusterSplits];
#pragma unroll
    for (int j = 0; j < kMaxClusterSplits; ++j) {
      lse[j] = j < splits ? cluster.map_shared_rank(split_lse, j)[r] : -INFINITY;
      out[j] = j < splits ? cluster.map_shared_rank(split_out, j)[r * row_stride + col] : 0.0f;
    }
    float lse_top = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxClusterSplits; ++j) lse_top = lse_max(lse_top, lse[j]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxClusterSplits; ++j) {
      const float weight = partial_weight(lse[j], lse_top);
      sum += weight;
      o = fmaf(weight, out[j], o);
    }
    const FinishedRow<float> merged = finish_row(lse_top, sum, lse_top == -INFINITY);
    write(r, col, merged.out(o), merged.lse);
  }
  cluster.sync();
#else
  (void)rows, (void)cols, (void)row_stride, (void)splits, (void)split_out, (void)split_lse,
      (void)write;
#endif
}

}  // namespace flashattn::cuda
