// One instantiation of the 16-bit tensor-core backward: f16, head-dim bucket 512.
#include "cuda/sm80/mma/backward_launch.cuh"

namespace flashattn::cuda::mma {
template void run_backward<__half, 512>(const BwdParams& p);
}  // namespace flashattn::cuda::mma
