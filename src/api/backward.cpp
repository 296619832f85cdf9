// backward(): validation, backend choice (the registry), launch.
#include "api/device_check.h"
#include "api/registry.h"
#include "api/validate.h"
#include "core/error.h"
#include "cuda/backends.h"

namespace flashattn {
namespace {

struct BackwardPlan {
  const BackendEntry* backend;
  DeviceKind device;
  BwdParams bwd;
};

// Validates everything (arguments, device, backend) before any work.
BackwardPlan plan_backward(const BackwardParams& p) {
  BwdParams bwd = make_bwd_params(p);
  const DeviceKind device = p.q.device.kind;
  if (device == DeviceKind::cuda)
    check_cuda_device(p.q.device.index,
                      {{"q", p.q.data, has_elements(p.q)},
                       {"k", p.k.data, has_elements(p.k)},
                       {"v", p.v.data, has_elements(p.v)},
                       {"out", p.out.data, has_elements(p.out)},
                       {"dout", p.dout.data, has_elements(p.dout)},
                       {"lse", p.lse, has_elements(p.q)},
                       {"variants.alibi_slopes", p.variants.alibi_slopes,
                        p.variants.alibi_slopes != nullptr},
                       {"variants.bias", p.variants.bias.data,
                        p.variants.bias.data != nullptr && has_elements(p.q) && p.k.shape[1] > 0},
                       {"dq", p.dq.data, has_elements(p.dq)},
                       {"dk", p.dk.data, has_elements(p.dk)},
                       {"dv", p.dv.data, has_elements(p.dv)},
                       {"sequences.cu_seqlens_q", p.sequences.cu_seqlens_q, bwd.seqs.packed()},
                       {"sequences.cu_seqlens_k", p.sequences.cu_seqlens_k, bwd.seqs.packed()}});
  read_sequences(bwd, p.sequences, device);
  const Backend backend = p.backend == Backend::automatic
                              ? automatic_backward_backend(bwd, device)
                              : p.backend;
  const std::string why = backward_unsupported(backend, bwd, device);
  if (!why.empty())
    fail(find_backend(backend) == nullptr ? Status::invalid_argument : Status::unsupported, why);
  return {find_backend(backend), device, bwd};
}

}  // namespace

Backend select_backward_backend(const BackwardParams& p) {
  return plan_backward(p).backend->info.backend;
}

void backward(const BackwardParams& params) {
  const BackwardPlan pl = plan_backward(params);
  if (pl.bwd.sizes.batch == 0) return;  // no tensor has an element
  if (pl.device == DeviceKind::cuda) cuda::run_backward(pl.backend->backward, pl.bwd);
  else pl.backend->backward(pl.bwd);
}

}  // namespace flashattn
