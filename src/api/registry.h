// The backend registry: the one table of the backends (names, devices, dtypes,
// limits, entry points) and the automatic choice among them. The public
// backends(), the C ABI's flashattn_backend_info, the CLI's `flashattn backends`,
// Python's flashattn.backends() and every error text about a backend's limits
// read this table; nothing else lists them.
#pragma once

#include <string>

#include "core/params.h"

namespace flashattn {

struct BackendEntry {
  BackendInfo info;
  void (*forward)(const AttnParams&);  // host tensors: called directly; CUDA: via cuda::run_forward
  // null where info.backward_max_head_dim is -1; CUDA: via cuda::run_backward
  void (*backward)(const BwdParams&) = nullptr;
};

const BackendEntry* find_backend(Backend backend);

// The backend automatic runs p on (validated; device checked).
Backend automatic_backend(const AttnParams& p, DeviceKind device);

// Empty when `backend` can run p (validated), else why not, naming the argument
// and the rule, with the backend automatic would run it on.
std::string unsupported(Backend backend, const AttnParams& p, DeviceKind device);

// The same two for the backward.
Backend automatic_backward_backend(const BwdParams& p, DeviceKind device);
std::string backward_unsupported(Backend backend, const BwdParams& p, DeviceKind device);

// "f32", "f16 or bf16", ...: the dtypes a backend takes, for messages and tables.
std::string dtype_list(const BackendInfo& info);

}  // namespace flashattn
