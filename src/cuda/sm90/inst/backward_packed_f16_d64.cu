// One instantiation of the Hopper backward on packed batches: f16, head-dim bucket 64.
#include "cuda/sm90/backward_launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_packed_backward<__half, 64>(const BwdParams& p);
}  // namespace flashattn::cuda::sm90
