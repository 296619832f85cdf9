// Element types of the CUDA kernels: conversion to and from the fp32 the
// kernels compute in, and the one runtime→type switch for DType.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls body(TypeTag<T>{}) with T the storage type of dtype.
template <typename Body>
void with_element_type(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: body(TypeTag<float>{}); return;
    case DType::f16: body(TypeTag<__half>{}); return;
    case DType::bf16: body(TypeTag<__nv_bfloat16>{}); return;
  }
  fail(Status::internal, "dtype: no CUDA element type");
}

}  // namespace flashattn::cuda
