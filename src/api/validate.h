// Turns public Params into AttnParams, rejecting every bad argument before any
// work starts.
#pragma once

#include "core/params.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

// Throws Error(invalid_argument) naming the argument and the rule it broke.
AttnParams make_attn_params(const Params& params);
BwdParams make_bwd_params(const BackwardParams& params);

// A variable-length batch (a.seqs.packed()): reads the prefix sums (from the
// device for CUDA tensors, waiting on a's stream), checks them against the
// tensors, and sets a's longest lengths and the mask resolved for them. Called
// after the device checks; nothing for a dense batch. Unchecked CUDA prefix
// sums (sequences.checked false) are not read: the longest lengths are the
// caller's maxima, which must be given, and run_forward and run_backward check
// the prefix sums on the device.
void read_sequences(AttnParams& a, const Sequences& sequences, DeviceKind device);

// A KV cache checked on the host (a.seqs.cache, checked): reads seqlens and
// the block table (from the device for CUDA tensors, waiting on a's stream),
// checks the lengths against the capacity and the pages in use against k's
// pages, and sets a's longest length and the mask resolved for it. Unchecked
// (or no cache): nothing; the longest length stays the capacity.
void read_kv_cache(AttnParams& a, DeviceKind device);

// Throws Error(invalid_argument) unless p is a dropout rate in [0, 1].
void check_dropout_p(float p);

// Whether a view holds any element (batch and seqlen may be 0): one without is
// never read or written, and its data pointer may be anything.
bool has_elements(const TensorView& t);

}  // namespace flashattn
