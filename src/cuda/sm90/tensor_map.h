// TMA descriptors for the (batch, seqlen, heads, head_dim) tensors of AttnParams.
#pragma once

#include <cuda.h>

#include <string>

#include "core/params.h"

namespace flashattn::cuda::sm90 {

// Empty when TMA can describe a tensor with these strides (16-byte aligned base,
// strides of dimensions longer than 1 positive multiples of 16 bytes), else why not.
std::string tma_unsupported(const TensorRef& t, const char* name, int seqlen, int heads, int batch);

// A rank-4 map (head_dim, seqlen, heads, batch) over 16-bit elements that reads
// and writes boxes of 64 columns × box_rows rows, 128-byte swizzled in shared
// memory; reads past the tensor's end give zeros, writes there are dropped.
CUtensorMap make_tensor_map(const TensorRef& t, bool bf16, int head_dim, int seqlen, int heads,
                            int batch, int box_rows);

}  // namespace flashattn::cuda::sm90
