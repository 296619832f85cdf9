#include "cuda/common/packed_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/common/check.h"
#include "cuda/common/element.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTargets = 3;
// Enough blocks to fill the GPU when the outputs are poisoned; when they are
// not, each block reads the verdict and returns, so the launch stays short.
constexpr unsigned kPoisonBlocks = 512;

struct PrefixSums {
  const int32_t* cu;
  int64_t total;   // the last entry
  int64_t longest;  // no sequence longer
};

// Whether entries [b, b + 1] of s keep the rules, for b in [-1, batch): entry 0
// is 0 (b = -1; also the total where there is no sequence), and sequence b is no
// shorter than 0 and no longer than s.longest, ending at s.total if it is the last.
__device__ bool keeps_rules(const PrefixSums& s, int b, int batch) {
  if (b < 0) return s.cu[0] == 0 && (batch > 0 || s.total == 0);
  const int64_t length = int64_t(s.cu[b + 1]) - s.cu[b];
  return length >= 0 && length <= s.longest && (b + 1 < batch || s.cu[b + 1] == s.total);
}

// One block: the verdict over both prefix sums, then their copy (all zero where
// a rule is broken); copy holds batch + 1 entries of q's, as many of k's, and
// the verdict (1: kept).
__global__ void __launch_bounds__(kThreads) check_prefix_sums_kernel(PrefixSums q, PrefixSums k,
                                                                     int batch, int32_t* copy) {
  bool kept = true;
  for (int b = int(threadIdx.x) - 1; b < batch; b += kThreads)
    kept = kept && keeps_rules(q, b, batch) && keeps_rules(k, b, batch);
  kept = __syncthreads_and(kept);
  for (int b = threadIdx.x; b <= batch; b += kThreads) {
    copy[b] = kept ? q.cu[b] : 0;
    copy[batch + 1 + b] = kept ? k.cu[b] : 0;
  }
  if (threadIdx.x == 0) copy[2 * (batch + 1)] = kept;
}

struct PoisonTargets {
  PoisonTarget target[kMaxTargets];
  int count;
  float* stats;
  int64_t stats_n;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) poison_kernel(const int32_t* verdict, PoisonTargets p) {
  if (*verdict) return;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  for (int i = 0; i < p.count; ++i) {
    const PoisonTarget& g = p.target[i];
    const int64_t n = g.rows * g.heads * g.width;
    for (int64_t e = first; e < n; e += stride) {
      const int c = int(e % g.width);
      const int64_t h = e / g.width % g.heads, r = e / g.width / g.heads;
      static_cast<T*>(g.t.data)[r * g.t.row_stride + h * g.t.head_stride + c] = from_float<T>(NAN);
    }
  }
  for (int64_t e = first; e < p.stats_n; e += stride) p.stats[e] = NAN;
}

}  // namespace

DeviceCheckedSequences::DeviceCheckedSequences(const AttnParams& p)
    : batch_(p.sizes.batch),
      dtype_(p.dtype),
      stream_(p.stream),
      copy_((2 * (size_t(p.sizes.batch) + 1) + 1) * sizeof(int32_t), p.device_index, p.stream) {
  const int32_t* copy = static_cast<const int32_t*>(copy_.data());
  check_prefix_sums_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(
      {p.seqs.cu_seqlens_q, p.seqs.total_q, p.sizes.seqlen_q},
      {p.seqs.cu_seqlens_k, p.seqs.total_k, p.sizes.seqlen_k}, p.sizes.batch,
      const_cast<int32_t*>(copy));
  check_launch("check_prefix_sums_kernel");
}

const int32_t* DeviceCheckedSequences::cu_seqlens_q() const {
  return static_cast<const int32_t*>(copy_.data());
}

const int32_t* DeviceCheckedSequences::cu_seqlens_k() const {
  return cu_seqlens_q() + batch_ + 1;
}

void DeviceCheckedSequences::poison(std::initializer_list<PoisonTarget> targets, float* stats,
                                    int64_t stats_n) const {
  PoisonTargets p{};
  int64_t largest = 0;
  for (const PoisonTarget& t : targets) {
    p.target[p.count++] = t;
    largest = std::max(largest, t.rows * t.heads * t.width);
  }
  p.stats = stats;
  p.stats_n = stats ? stats_n : 0;
  largest = std::max(largest, p.stats_n);
  if (largest == 0) return;
  const unsigned blocks =
      unsigned(std::min<int64_t>((largest + kThreads - 1) / kThreads, kPoisonBlocks));
  const int32_t* verdict = cu_seqlens_k() + batch_ + 1;
  with_element_type(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    poison_kernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream_)>>>(
        verdict, p);
  });
  check_launch("poison_kernel");
}

}  // namespace flashattn::cuda
