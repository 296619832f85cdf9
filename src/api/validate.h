// Turns public Params into AttnParams, rejecting every bad argument before any
// work starts.
#pragma once

#include "core/params.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// Throws Error(invalid_argument) naming the argument and the rule it broke.
AttnParams make_attn_params(const Params& params);

}  // namespace flashattn
