// One instantiation of the 16-bit tensor-core forward: bf16, head-dim bucket 128.
#include "cuda/sm80/mma/forward_launch.cuh"

namespace flashattn::cuda::mma {
template void run_forward<__nv_bfloat16, 128>(const AttnParams& p);
}  // namespace flashattn::cuda::mma
