// The multi-head attention exercise's entry point on top of flashattn.
// Q, K, V and output are N × d_model fp32 device matrices, row-major; head i
// owns columns [i·d_model/h, (i+1)·d_model/h). That is the library's
// (batch 1, seqlen N, heads h, head_dim d_model/h) layout, so solve is one
// forward() call on the default stream, with no synchronisation and no
// allocation, on the caller's current device. Invalid arguments write nothing; solve_last_error() says why.
#include "solve.h"

#include <cuda_runtime.h>

#include <string>

#include "flashattn/flashattn.hpp"

namespace {

thread_local std::string g_last_error;

bool valid(const float* Q, const float* K, const float* V, const float* output, int N,
           int d_model, int h) {
  if (!Q || !K || !V || !output) {
    g_last_error = "solve: Q, K, V and output must be non-null device pointers";
  } else if (N < 1) {
    g_last_error = "N: is " + std::to_string(N) + ", must be >= 1";
  } else if (d_model < 1) {
    g_last_error = "d_model: is " + std::to_string(d_model) + ", must be >= 1";
  } else if (h < 1 || h > d_model) {
    g_last_error = "h: is " + std::to_string(h) + ", must be in [1, d_model]";
  } else if (d_model % h != 0) {
    g_last_error = "d_model % h: " + std::to_string(d_model) + " is not a multiple of h = " +
                   std::to_string(h);
  } else {
    return true;
  }
  return false;
}

}  // namespace

extern "C" void solve(const float* Q, const float* K, const float* V, float* output, int N,
                      int d_model, int h) {
  g_last_error.clear();
  if (!valid(Q, K, V, output, N, d_model, h)) return;
  int device = 0;  // the caller's current device, as for any CUDA call
  if (cudaGetDevice(&device) != cudaSuccess) {
    g_last_error = "solve: cudaGetDevice failed; is a CUDA device present?";
    return;
  }
  const flashattn::Device gpu{flashattn::DeviceKind::cuda, device};
  auto view = [&](const float* data) {
    return flashattn::contiguous_view(const_cast<float*>(data), flashattn::DType::f32, 1, N, h,
                                      d_model / h, gpu);
  };
  flashattn::Params p;
  p.q = view(Q);
  p.k = view(K);
  p.v = view(V);
  p.out = view(output);
  try {
    flashattn::forward(p);
  } catch (const flashattn::Error& e) {
    g_last_error = e.what();
  }
}

extern "C" const char* solve_last_error(void) { return g_last_error.c_str(); }
