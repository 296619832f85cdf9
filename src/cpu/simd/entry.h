// The entry points of the CPU kernels, one namespace per instruction set
// (cpu/isa.h); cpu/flash.cpp picks one per call.
#pragma once

#include "core/params.h"

namespace flashattn::cpu {

namespace baseline {
void forward_pass(const AttnParams& p);
void backward_pass(const BwdParams& p);
}
namespace avx2 {
void forward_pass(const AttnParams& p);
void backward_pass(const BwdParams& p);
}
namespace avx512 {
void forward_pass(const AttnParams& p);
void backward_pass(const BwdParams& p);
}

}  // namespace flashattn::cpu
