// One instantiation of the Hopper backward: f16, head-dim bucket 256, Sᵀ and dPᵀ
// 192 deep (q's, k's and v's head_dim 176–192), plain attention.
#include "cuda/sm90/backward_launch.cuh"

namespace flashattn::cuda::sm90 {
template void run_narrow_backward<__half, 256, 192, 192>(const BwdParams& p);
}  // namespace flashattn::cuda::sm90
