#include "cuda/common/split_kv.h"

#include <algorithm>
#include <cmath>

#include "cuda/common/check.h"

namespace flashattn::cuda {
namespace {

constexpr int kMergeThreads = 128;
constexpr int kMaxSplits = 16;
constexpr int kBlocksPerSm = 2;  // what the split kernels' launch bounds allow

// One block per output row (b, h, i): the split weights, then the columns.
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const AttnParams p, const SplitKv split) {
  const Sizes s = p.sizes;
  const int i = int(blockIdx.x % s.seqlen_q);
  const int h = int(blockIdx.x / s.seqlen_q % s.heads_q);
  const int b = int(blockIdx.x / s.seqlen_q / s.heads_q);
  float lse_max = -INFINITY;
  for (int k = 0; k < split.count; ++k) lse_max = fmaxf(lse_max, split.lse[split.row_index(k, b, h, i, s)]);
  float sum = 0.0f;
  if (lse_max != -INFINITY)
    for (int k = 0; k < split.count; ++k) sum += expf(split.lse[split.row_index(k, b, h, i, s)] - lse_max);
  const float lse = sum > 0.0f ? lse_max + logf(sum) : -INFINITY;
  float* out = static_cast<float*>(p.o.data) + b * p.o.batch_stride + int64_t(i) * p.o.row_stride +
               h * p.o.head_stride;
  for (int c = threadIdx.x; c < s.head_dim; c += kMergeThreads) {
    float o = 0.0f;
    for (int k = 0; k < split.count && lse != -INFINITY; ++k) {
      const int64_t row = split.row_index(k, b, h, i, s);
      o += expf(split.lse[row] - lse) * split.o[row * s.head_dim + c];
    }
    out[c] = o;
  }
  if (p.softmax.lse && threadIdx.x == 0) p.softmax.lse[(int64_t(b) * s.heads_q + h) * s.seqlen_q + i] = lse;
}

}  // namespace

int choose_splits(int64_t blocks_per_split, int key_tiles, int device_index) {
  int sms = 0;
  FLASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_index));
  const int64_t slots = int64_t(sms) * kBlocksPerSm;
  if (blocks_per_split >= slots) return 1;
  const int64_t wanted = (slots + blocks_per_split - 1) / blocks_per_split;
  const int count = int(std::min<int64_t>({wanted, key_tiles / 2, kMaxSplits}));
  return std::max(count, 1);
}

SplitWorkspace::SplitWorkspace(const AttnParams& p, int count) : stream_(p.stream) {
  const Sizes& s = p.sizes;
  const size_t rows = size_t(count) * s.batch * s.heads_q * s.seqlen_q;
  auto stream = static_cast<cudaStream_t>(p.stream);
  split_.count = count;
  FLASHATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&split_.o),
                                       rows * s.head_dim * sizeof(float), stream));
  const cudaError_t status =
      cudaMallocAsync(reinterpret_cast<void**>(&split_.lse), rows * sizeof(float), stream);
  if (status != cudaSuccess) {
    cudaFreeAsync(split_.o, stream);
    check(status, "cudaMallocAsync");
  }
}

SplitWorkspace::~SplitWorkspace() {
  auto stream = static_cast<cudaStream_t>(stream_);
  cudaFreeAsync(split_.o, stream);
  cudaFreeAsync(split_.lse, stream);
}

void merge_splits(const AttnParams& p, const SplitKv& split) {
  const int64_t rows = int64_t(p.sizes.batch) * p.sizes.heads_q * p.sizes.seqlen_q;
  merge_kernel<<<unsigned(rows), kMergeThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p, split);
  check_launch("merge_kernel");
}

}  // namespace flashattn::cuda
