// The merge of key splits (key_split.h): one warp per query row.
#include <cmath>

#include "cuda/common/check.h"
#include "cuda/sm80/f16x3/key_split.h"

namespace flashattn::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    merge_kernel(const AttnParams p, const KeySplit split) {
  const Sizes& s = p.sizes;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;  // (b, hq, i)
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float lse_s[kMaxKeySplits];
  float lse_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < kMaxKeySplits; ++j) {
    lse_s[j] = j < split.count ? split.lse[j * rows + row] : -INFINITY;
    lse_max = fmaxf(lse_max, lse_s[j]);
  }
  // Weights relative to the largest split; all zero for a row that saw no key.
  float weight[kMaxKeySplits], sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxKeySplits; ++j) {
    weight[j] = lse_max == -INFINITY ? 0.0f : expf(lse_s[j] - lse_max);
    sum += weight[j];
  }
  const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
  const int i = int(row % s.seqlen_q), hq = int(row / s.seqlen_q % s.heads_q);
  const int b = int(row / (int64_t(s.seqlen_q) * s.heads_q));
  float* out = static_cast<float*>(p.o.data) + b * p.o.batch_stride + hq * p.o.head_stride +
               int64_t(i) * p.o.row_stride;
  for (int c = lane; c < s.head_dim; c += 32) {
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxKeySplits; ++j)
      if (j < split.count) o = fmaf(weight[j], split.out[(j * rows + row) * s.head_dim + c], o);
    out[c] = o * inv_sum;
  }
  if (p.softmax.lse && lane == 0) p.softmax.lse[row] = sum > 0.0f ? lse_max + logf(sum) : -INFINITY;
}

}  // namespace

void merge_key_splits(const AttnParams& p, const KeySplit& split) {
  const Sizes& s = p.sizes;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  merge_kernel<<<unsigned(blocks), 32 * kWarpsPerBlock, 0, static_cast<cudaStream_t>(p.stream)>>>(
      p, split);
  check_launch("merge_kernel");
}

}  // namespace flashattn::cuda
