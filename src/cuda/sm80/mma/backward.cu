#include "core/error.h"
#include "cuda/backends.h"

namespace flashattn::cuda {

void mma_backward(const BwdParams&) { fail(Status::unsupported, "backend: cuda_mma backward: in progress"); }

}  // namespace flashattn::cuda
