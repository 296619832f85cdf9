// Score variants: a change to each score before the softmax, given the raw score
// q_i·k_j (before the scale), its query row and its key, returning a raw score
// (a variant that needs the scale, as softcap does, carries it). Softcap, ALiBi
// and bias tensors are variants; identity (nothing changed) is the only one
// today. Every backend's score step calls the variant before the mask (the CPU
// reference included) and skips the call when kIdentity, so the identity costs
// nothing in a kernel.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

struct IdentityScore {
  static constexpr bool kIdentity = true;
  template <typename F>
  FLASHATTN_HOST_DEVICE F operator()(F s, int64_t /*row*/, int64_t /*key*/) const {
    return s;
  }
};

}  // namespace flashattn
