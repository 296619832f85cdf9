// FLASHATTN_HOST_DEVICE: marks the core definitions that CUDA kernels and the
// CPU backends both call, so that the oracle and the kernels share one meaning.
#pragma once

#ifdef __CUDACC__
#define FLASHATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASHATTN_HOST_DEVICE inline
#endif
