// One instantiation of the Hopper forward: bf16, head-dim bucket 384 (split by columns).
#include "cuda/sm90/launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_forward<__nv_bfloat16, 384>(const AttnParams& p);
}  // namespace flashattn::cuda::sm90
