// D_i = Σ_c dO_ic·O_ic, the backward's constant of each query row
// (dS = P∘(dP − D)), into p.grad.row_dot: every CUDA backward computes it first,
// once, before its key-tile kernels. With it the same kernel may zero a scratch
// range, the tensor-core backwards' fp32 dQ sums (common/dq_output.h): both
// passes are bound by memory, and as two (D, then a memset of the sums) they
// took 51 + ~30 µs where one takes what their bytes take together (cuDNN's
// own D pass zeroes its dQ sums the same way: H200, B16 N1024 H16 d128,
// docs/perf/cuda_wgmma_backward.md, v19.2). Each of its blocks lets the next
// kernel's blocks be scheduled from its start (a programmatic dependent
// launch, common/launch.h), so a key-tile kernel launched so may begin while D
// finishes, as long as it waits (griddepcontrol.wait) before it reads D or
// adds into the zeroed range.
#pragma once

#include <cstddef>

#include "core/params.h"

namespace flashattn::cuda {

// D into p.grad.row_dot (contiguous (batch, heads_q, seqlen_q) over the
// tensors' own sizes) on p's stream; [zeroed, zeroed + zeroed_bytes) = 0 in the
// same kernel, zeroed 16-byte aligned.
void launch_row_dot(const BwdParams& p, void* zeroed = nullptr, size_t zeroed_bytes = 0);

}  // namespace flashattn::cuda
