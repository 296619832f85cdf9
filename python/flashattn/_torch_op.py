"""attention() on PyTorch tensors, as the custom operator torch.ops.flashattn.attention_fwd.

Being a torch.library custom op with a fake (meta) implementation lets torch.compile
(fullgraph=True) trace through it; plain eager calls that need no autograd graph run the
op's body directly, without the dispatcher's per-call cost. It runs on the caller's current CUDA stream, never
synchronises the host, and allocates only out and lse (plus one contiguous copy of an
input whose strides the kernels cannot read). Autograd is registered with a backward that
raises until the backward kernels exist; the forward already saves what they will need.
"""
from typing import Optional

import torch

from . import _abi, _errors, _layout, _library, _options

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"flashattn needs torch >= 2.4 (torch.library.custom_op); "
                      f"found torch {torch.__version__}")

DTYPES = {torch.float32: _abi.F32, torch.float16: _abi.F16, torch.bfloat16: _abi.BF16}
DEVICES = {"cpu": _abi.CPU, "cuda": _abi.CUDA}

BACKWARD_MISSING = (
    "flashattn: backward kernels are not implemented yet; flashattn.attention and "
    "flashattn.sdpa are forward-only. Run them under torch.no_grad() or torch.inference_mode(), "
    "or use torch.nn.functional.scaled_dot_product_attention where gradients are needed")


def check(q, k, v, causal, causal_alignment, backend):
    """Checks what the output shapes depend on and the options; returns the library's mask
    and backend names. The library checks everything else (sizes, devices, strides)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _layout.require_4d(name, t.shape)
        if t.dtype not in DTYPES:
            raise _errors.InvalidArgumentError(
                f"{name}: dtype is {t.dtype}, must be torch.float32, torch.float16 or "
                f"torch.bfloat16")
        if t.device.type not in DEVICES:
            raise _errors.UnsupportedError(
                f"{name}: device is {t.device}, flashattn runs on cpu and cuda tensors")
    return _options.mask_name(causal, causal_alignment), _options.backend_name(backend)


def kernel_tensor(t):
    """t itself when the kernels can read its strides, else one contiguous copy; and its view."""
    if not _layout.kernels_accept(t.shape, t.stride()):
        t = t.contiguous()
    view = _abi.view(t.data_ptr(), DTYPES[t.dtype], t.shape, t.stride(),
                     DEVICES[t.device.type], t.device.index or 0)
    return t, view


def forward_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  causal_alignment: str, scale: Optional[float],
                  backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) for (batch, seqlen, heads, head_dim) q, k, v; see flashattn.attention."""
    mask, backend = check(q, k, v, causal, causal_alignment, backend)
    # The inputs stay referenced until the call returns; on CUDA, a copy freed after that
    # goes back to the caching allocator in the order of this stream, so it is safe.
    (q, qv), (k, kv), (v, vv) = (kernel_tensor(t) for t in (q, k, v))
    out, out_view = kernel_tensor(torch.empty(q.shape, dtype=q.dtype, device=q.device))
    lse = torch.empty(_layout.lse_shape(q.shape), dtype=torch.float32, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else None
    _library.forward(qv, kv, vv, out_view, lse=lse.data_ptr(), scale=scale, mask=mask,
                     backend=backend, stream=stream)
    return out, lse


attention_fwd = torch.library.custom_op("flashattn::attention_fwd", mutates_args=())(
    forward_eager)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, causal_alignment, scale, backend):
    check(q, k, v, causal, causal_alignment, backend)
    return (q.new_empty(q.shape),
            q.new_empty(_layout.lse_shape(q.shape), dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    q, k, v, causal, causal_alignment, scale, backend = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal, ctx.causal_alignment, ctx.scale = causal, causal_alignment, scale


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(BACKWARD_MISSING)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(q, k, v, *, causal, causal_alignment, scale, backend):
    """(out, lse) for torch q, k, v through the custom op; see flashattn.attention."""
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: is a {type(t).__module__}.{type(t).__qualname__}; q, k "
                            f"and v must all be torch tensors or all NumPy arrays")
    if direct_call_is_safe(q, k, v):
        return forward_eager(q, k, v, causal, causal_alignment, scale, backend)
    return attention_fwd(q, k, v, causal, causal_alignment, scale, backend)


def direct_call_is_safe(q, k, v):
    """Whether the op's body may run without the dispatcher: eager plain tensors that need
    no autograd graph. The dispatcher costs about 0.08 ms per call, more than the kernel
    at small shapes; torch.compile, export and tensor subclasses (fake, functional) still
    go through the registered op."""
    if torch.compiler.is_compiling():
        return False
    if any(type(t) is not torch.Tensor for t in (q, k, v)):
        return False
    return not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                             v.requires_grad))
