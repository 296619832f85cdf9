// Turns public Params into AttnParams, rejecting every bad argument before any
// work starts.
#pragma once

#include "core/params.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// Throws Error(invalid_argument) naming the argument and the rule it broke.
AttnParams make_attn_params(const Params& params);
BwdParams make_bwd_params(const BackwardParams& params);

// Whether a view holds any element (batch and seqlen may be 0): one without is
// never read or written, and its data pointer may be anything.
bool has_elements(const TensorView& t);

}  // namespace flashattn
