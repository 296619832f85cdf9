// One instantiation of the Hopper forward: bf16, head-dim bucket 128.
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__nv_bfloat16, 128>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
