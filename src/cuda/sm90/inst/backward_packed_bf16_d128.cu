// One instantiation of the Hopper backward on packed batches: bf16, head-dim bucket 128.
#include "cuda/sm90/backward_launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_packed_backward<__nv_bfloat16, 128>(const BwdParams& p);
}  // namespace flashattn::cuda::sm90
