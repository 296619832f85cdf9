// One instantiation of the 16-bit tensor-core forward: f16, head-dim bucket 512.
#include "cuda/sm80/mma/forward_launch.cuh"

namespace flashattn::cuda::mma {
template void run_forward<__half, 512>(const AttnParams& p);
}  // namespace flashattn::cuda::mma
