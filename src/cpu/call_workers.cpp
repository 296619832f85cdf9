#include "cpu/call_workers.h"

#include <algorithm>
#include <cmath>

namespace flashattn::cpu {
namespace {

// One thread's rates on the lent 16-core Xeon (docs/perf/cpu.md): the
// kernels' fp32 rate in their tiles and a stream from memory.
constexpr double kFlopsPerUs = 100e3;  // 100 GFLOP/s
constexpr double kBytesPerUs = 16e3;   // 16 GB/s
// A worker's share of the work that repays its wake-up (about 10 µs there,
// while the caller works too).
constexpr double kWorkPerWorkerUs = 25.0;

// Elements of a (batch, rows, heads, head_dim) tensor.
double elements(const Sizes& sz, int rows, int heads, int head_dim) {
  return double(sz.batch) * rows * heads * head_dim;
}

}  // namespace

int workers_worth_waking(double flops, double bytes) {
  const double single_us = flops / kFlopsPerUs + bytes / kBytesPerUs;
  const double workers = std::floor(single_us / kWorkPerWorkerUs);
  return int(std::clamp(workers, 1.0, 1e6));
}

int forward_workers(const AttnParams& p) {
  const Sizes& sz = p.sizes;
  const double flops = 2.0 * double(sz.batch) * sz.heads_q * sz.seqlen_q * double(sz.seqlen_k) *
                       (sz.head_dim + sz.head_dim_v);
  const double bytes = double(dtype_size(p.dtype)) *
                       (elements(sz, sz.seqlen_q, sz.heads_q, sz.head_dim + sz.head_dim_v) +
                        elements(sz, sz.seqlen_k, sz.heads_kv, sz.head_dim + sz.head_dim_v));
  return workers_worth_waking(flops, bytes);
}

int backward_workers(const BwdParams& p) {
  const Sizes& sz = p.sizes;
  // Five products of the forward's size: S, dP, dV, dK, dQ.
  const double flops = 5.0 * double(sz.batch) * sz.heads_q * sz.seqlen_q * double(sz.seqlen_k) *
                       (sz.head_dim + sz.head_dim_v);
  // Q, O, dO, dQ and K, V, dK, dV.
  const double bytes = double(dtype_size(p.dtype)) *
                       (2.0 * elements(sz, sz.seqlen_q, sz.heads_q, sz.head_dim + sz.head_dim_v) +
                        2.0 * elements(sz, sz.seqlen_k, sz.heads_kv, sz.head_dim + sz.head_dim_v));
  return workers_worth_waking(flops, bytes);
}

}  // namespace flashattn::cpu
