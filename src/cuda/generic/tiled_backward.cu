#include "core/error.h"
#include "cuda/backends.h"

namespace flashattn::cuda {

void tiled_backward(const BwdParams&) { fail(Status::unsupported, "backend: cuda_tiled backward: in progress"); }

}  // namespace flashattn::cuda
