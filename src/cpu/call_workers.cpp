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

// A forward's multiply-adds ×2 (both products) and the bytes of Q, O, K and V.
struct Work {
  double flops, bytes;
};
Work forward_work(const AttnParams& p) {
  const Sizes& sz = p.sizes;
  const double widths = sz.head_dim + sz.head_dim_v;
  const double rows_q = double(sz.batch) * sz.seqlen_q * sz.heads_q;
  const double rows_k = double(sz.batch) * sz.seqlen_k * sz.heads_kv;
  return {2.0 * rows_q * sz.seqlen_k * widths,
          double(dtype_size(p.dtype)) * (rows_q + rows_k) * widths};
}

}  // namespace

int workers_worth_waking(double flops, double bytes) {
  const double single_us = flops / kFlopsPerUs + bytes / kBytesPerUs;
  const double workers = std::floor(single_us / kWorkPerWorkerUs);
  return int(std::clamp(workers, 1.0, 1e6));
}

int forward_workers(const AttnParams& p) {
  const Work w = forward_work(p);
  return workers_worth_waking(w.flops, w.bytes);
}

int backward_workers(const BwdParams& p) {
  // Five products of the forward's size where it has two (S, dP, dV, dK, dQ);
  // Q, O, dO, dQ and K, V, dK, dV where it has Q, O, K, V.
  const Work w = forward_work(p);
  return workers_worth_waking(2.5 * w.flops, 2.0 * w.bytes);
}

}  // namespace flashattn::cpu
