"""attention() on PyTorch tensors, as the custom operators torch.ops.flashattn.attention_fwd
and torch.ops.flashattn.attention_bwd, with autograd.

Being torch.library custom ops with fake (meta) implementations lets torch.compile
(fullgraph=True) trace through them, forward and backward; plain eager calls that need no
autograd graph run the ops' bodies directly, without the dispatcher's per-call cost. They
run on the caller's current CUDA stream, never synchronise the host (but for the library's
read of a checked packed batch's prefix sums), and allocate only their outputs (plus one
contiguous copy of an input whose strides the kernels cannot read). The forward saves q, k,
v, out and lse; the backward recomputes the probabilities from them (flashattn_backward), so
no score matrix is ever stored. The variants (window, softcap, ALiBi), then a
variable-length batch's prefix sums and max_seqlen values, then attn_mask (a bias or boolean
mask), then dropout's rate, seed and offset, then whether the prefix sums are checked on the
host (checked_sequences; False: on the device, without waiting) are trailing arguments of
both ops, with defaults that turn them off (a dense batch); ALiBi's slopes, the prefix sums
and attn_mask get no gradient. The seed travels as an int64 (a uint64 seed of 2**63 or more
as its two's-complement value) and the backward regenerates the forward's dropout from it.
"""
import inspect
from typing import Optional

import torch

from . import (_abi, _backends, _bias, _dropout, _errors, _layout, _library, _options,
               _sequences)

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"flashattn needs torch >= 2.4 (torch.library.custom_op); "
                      f"found torch {torch.__version__}")

DTYPES = {torch.float32: _abi.F32, torch.float16: _abi.F16, torch.bfloat16: _abi.BF16}
MASK_TYPES = {torch.bool: _abi.BIAS_BOOL, torch.float32: _abi.BIAS_F32,
              torch.float16: _abi.BIAS_F16, torch.bfloat16: _abi.BIAS_BF16}

def check_tensor(name, t):
    """An input: a 4-d torch tensor of a dtype flashattn takes, on the CPU or a CUDA device.
    Its sizes, device index and strides are the library's to check."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: is a {_options.type_name(t)}; the inputs must all be torch "
                        f"tensors or all NumPy arrays")
    _layout.require_4d(name, t.shape)
    if t.dtype not in DTYPES:
        raise _errors.InvalidArgumentError(
            f"{name}: dtype is {t.dtype}, must be torch.float32, torch.float16 or "
            f"torch.bfloat16")
    if not (t.is_cuda or t.is_cpu):
        raise _errors.UnsupportedError(
            f"{name}: device is {t.device}, flashattn runs on cpu and cuda tensors")


def check(q, k, v, causal, causal_alignment, backend, alibi_slopes=None, cu_seqlens_q=None,
          cu_seqlens_k=None):
    """Checks what the output shapes depend on, the options, ALiBi's slopes and the prefix
    sums (whose size and device the library cannot see); returns the library's mask name and
    backend value. The library checks everything else (sizes, devices, strides, the window
    and softcap, the prefix sums' values)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
    if alibi_slopes is not None:
        check_slopes(alibi_slopes, q)
    check_prefix_sums(cu_seqlens_q, cu_seqlens_k, q)
    return _options.mask_name(causal, causal_alignment), _options.backend_value(backend)


def check_prefix_sums(cu_seqlens_q, cu_seqlens_k, q):
    """A variable-length batch's prefix sums, where either is given: int32 torch tensors
    (batch + 1,) on q's device, both given."""
    if cu_seqlens_q is None and cu_seqlens_k is None:
        return
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor):
            raise TypeError(f"{name}: is a {_options.type_name(cu)}; with torch inputs it must "
                            f"be a torch tensor (torch.int32, on q's device)")
    _sequences.require_prefix_sums(cu_seqlens_q, cu_seqlens_k, lambda cu: cu.dtype,
                                   lambda cu: cu.dtype == torch.int32)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.device != q.device:
            raise _errors.InvalidArgumentError(
                f"{name}: device is {cu.device}, must be q's device ({q.device})")


def check_slopes(alibi_slopes, q):
    """ALiBi's slopes: a float32 torch tensor (heads_q,) on q's device."""
    _layout.require_4d("q", q.shape)
    if not isinstance(alibi_slopes, torch.Tensor):
        raise TypeError(f"alibi_slopes: is a {_options.type_name(alibi_slopes)}; with torch "
                        f"inputs it must be a torch tensor (torch.float32, one slope per query "
                        f"head) or None")
    _layout.require_slopes(alibi_slopes.shape, alibi_slopes.dtype,
                           alibi_slopes.dtype == torch.float32, q.shape[2])
    if alibi_slopes.device != q.device:
        raise _errors.InvalidArgumentError(
            f"alibi_slopes: device is {alibi_slopes.device}, must be q's device ({q.device})")


def check_mask(attn_mask, q, k, heads_first=False):
    """attn_mask: a torch tensor of bool (a mask) or a float dtype flashattn takes (a bias),
    on q's device, whose shape broadcasts to the scores' (batch, heads_q, seqlen_q,
    seqlen_k). Returns the (shape, strides) the library reads it with (_bias.broadcast).
    heads_first: q and k are (batch, heads, seqlen, head_dim), as in torch's SDPA."""
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask: is a {_options.type_name(attn_mask)}; with torch inputs "
                        f"it must be a torch tensor (bool, or a float dtype) or None")
    if attn_mask.dtype not in MASK_TYPES:
        raise _errors.InvalidArgumentError(
            f"attn_mask: dtype is {attn_mask.dtype}, must be torch.bool (a mask, True: "
            f"attend), torch.float32, torch.float16 or torch.bfloat16 (a bias added to the "
            f"scores)")
    if attn_mask.device != q.device:
        raise _errors.InvalidArgumentError(
            f"attn_mask: device is {attn_mask.device}, must be q's device ({q.device})")
    for name, t in (("q", q), ("k", k)):
        _layout.require_4d(name, t.shape)
    if heads_first:
        target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    else:
        target = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    return _bias.broadcast(attn_mask.shape, attn_mask.stride(), target)


def variant_values(window_left, window_right, softcap, alibi_slopes, attn_mask=None,
                   mask_geometry=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0):
    """The (window_left, window_right, softcap, slopes address, bias view, dropout) the
    library takes, and the slopes tensor behind the address (contiguous: a strided one is
    copied), which must stay referenced until the call returns. attn_mask is read in place,
    with mask_geometry, check_mask's (shape, strides). dropout_seed and dropout_offset are
    the ops' int64 values of the uint64s."""
    slopes = None if alibi_slopes is None else alibi_slopes.contiguous()
    address = 0 if slopes is None else slopes.data_ptr()
    bias = _abi.NO_BIAS
    if attn_mask is not None:
        bias = _abi.bias_view(attn_mask.data_ptr(), MASK_TYPES[attn_mask.dtype], *mask_geometry)
    dropout = _abi.NO_DROPOUT
    if dropout_p != 0.0:
        dropout = (dropout_p, dropout_seed % _dropout.SEED_END, dropout_offset % _dropout.SEED_END)
    return (window_left, window_right, softcap, address, bias, dropout), slopes


def op_dropout(dropout):
    """A _dropout.dropout_values() result (or None) as the ops' trailing (dropout_p,
    dropout_seed, dropout_offset) arguments, the uint64s as int64 values."""
    if dropout is None:
        return 0.0, 0, 0
    p, seed, offset = dropout
    signed = lambda x: x - _dropout.SEED_END if x >= _dropout.DRAW_END else x
    return p, signed(seed), signed(offset)


def sequence_values(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, lib, checked=True):
    """The flashattn_sequences values (prefix sums' addresses, batch, max_seqlen values,
    checked) of a variable-length batch, or None for a dense one (no prefix sums), and the
    contiguous prefix sums behind the addresses, which must stay referenced until the call
    returns. The library checks a max_seqlen that is given on its own host copy of the
    prefix sums; for a library from before that (lib, a _library.load() result or None: the
    package's), it is checked here on a copy of ours, which on CUDA waits for the stream,
    unless the call is unchecked (checked False: nothing may wait)."""
    if cu_seqlens_q is None and cu_seqlens_k is None:
        return None, ()
    kept = tuple(cu.contiguous() for cu in (cu_seqlens_q, cu_seqlens_k))
    if checked and not _library.knows_max_seqlen(lib or _library.library()):
        for name, max_seqlen, cu, cu_name in (
                ("max_seqlen_q", max_seqlen_q, kept[0], "cu_seqlens_q"),
                ("max_seqlen_k", max_seqlen_k, kept[1], "cu_seqlens_k")):
            if max_seqlen is not None:
                _sequences.require_longest(name, max_seqlen, cu.cpu().numpy(), cu_name)
    return (kept[0].data_ptr(), kept[1].data_ptr(), kept[0].shape[0] - 1, max_seqlen_q,
            max_seqlen_k, checked), kept


def seqlen_first(sizes, heads_first):
    """(batch, seqlen, heads, head_dim) order of a 4-tuple given in t's own dimension order."""
    return (sizes[0], sizes[2], sizes[1], sizes[3]) if heads_first else sizes


def kernel_tensor(t, heads_first=False):
    """t itself when the kernels can read its strides, else one contiguous copy; and its view.
    heads_first: t is (batch, heads, seqlen, head_dim), as in torch's SDPA. A tensor without
    elements is never read (its data_ptr() is 0): its view gets row-major strides. Runs on
    every call's inputs: each stride is read once, as host time per call adds up."""
    strides = t.stride()
    if t.numel() == 0:
        shape = seqlen_first(t.shape, heads_first)
        return t, tensor_view(t, shape, _layout.contiguous_strides(shape))
    if not _layout.kernels_accept(t.shape, strides):
        t = t.contiguous()
        strides = t.stride()
    return t, tensor_view(t, seqlen_first(t.shape, heads_first),
                          seqlen_first(strides, heads_first))


def tensor_view(t, shape, strides):
    """The library's view of t's memory with these (batch, seqlen, heads, head_dim) sizes and
    strides (in elements)."""
    device_index = t.get_device()  # -1 on the CPU
    return _abi.view(t.data_ptr(), DTYPES[t.dtype], shape, strides,
                     _abi.CUDA if device_index >= 0 else _abi.CPU, max(device_index, 0))


# The raw handle, without building a torch.cuda.Stream object (microseconds per call);
# the public API where a PyTorch build lacks it.
_raw_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(device_index):
    """The address of PyTorch's current CUDA stream on cuda:device_index."""
    if _raw_current_stream is not None:
        return _raw_current_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def run(q, k, v, causal, causal_alignment, scale, backend, with_lse, heads_first=False,
        lib=None, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
        cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
        attn_mask=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0,
        checked_sequences=True):
    """(out, lse) for q, k, v; lse is None unless with_lse. See flashattn.attention. out has
    q's shape but v's head_dim.

    heads_first: q, k, v and out are (batch, heads, seqlen, head_dim), as in torch's SDPA;
    out is then a view of (batch, seqlen, heads, head_dim) contiguous memory. lib: a
    _library.load() result to call instead of the package's library, possibly one built
    before the backend table: backend names are mapped to values by the package's library.
    window_left, window_right, softcap, alibi_slopes: the variants, checked as far as
    _options does (window_sides, softcap_value). cu_seqlens_q, cu_seqlens_k (None: dense):
    a variable-length batch packed in q, k, v of batch 1 (flashattn.varlen_attention);
    lse is then (1, heads_q, total_q); checked_sequences False checks them on the device,
    without waiting (max_seqlen_q and max_seqlen_k then needed). attn_mask: None or a bias
    or mask (check_mask), in the scores' (batch, heads, seqlen_q, seqlen_k) order whatever
    heads_first says.
    dropout_p, dropout_seed, dropout_offset: the ops' (op_dropout).
    """
    mask, backend = check(q, k, v, causal, causal_alignment, backend, alibi_slopes,
                          cu_seqlens_q, cu_seqlens_k)
    geometry = None if attn_mask is None else check_mask(attn_mask, q, k, heads_first)
    # The inputs (the slopes, prefix sums and mask too) stay referenced until the call
    # returns; on CUDA, a copy freed after that goes back to the caching allocator in the
    # order of this stream, so it is safe.
    variants, slopes = variant_values(window_left, window_right, softcap, alibi_slopes,
                                      attn_mask, geometry, dropout_p, dropout_seed,
                                      dropout_offset)
    sequences, prefix_sums = sequence_values(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                             max_seqlen_k, lib, checked_sequences)
    (q, qv), (k, kv), (v, vv) = [kernel_tensor(t, heads_first) for t in (q, k, v)]
    q_shape = qv[2:6]  # (batch, seqlen_q, heads_q, head_dim)
    out_shape = _layout.out_shape(q_shape, vv[2:6])  # v's head_dim
    _, seqlen_q, heads_q, head_dim_v = out_shape
    out_strides = (seqlen_q * heads_q * head_dim_v, heads_q * head_dim_v, head_dim_v, 1)
    out = q.new_empty_strided(seqlen_first(out_shape, heads_first),
                              seqlen_first(out_strides, heads_first))
    # out's view is known from how it was made; one without elements takes kernel_tensor's.
    out_view = (tensor_view(out, out_shape, out_strides) if out.numel()
                else kernel_tensor(out, heads_first)[1])
    lse = (q.new_empty(_layout.lse_shape(q_shape), dtype=torch.float32) if with_lse
           else None)
    _library.forward(qv, kv, vv, out_view, lse=lse.data_ptr() if with_lse else None,
                     scale=scale, mask=mask, backend=backend,
                     stream=current_stream(qv[-1]) if q.is_cuda else None, variants=variants,
                     sequences=sequences, lib=lib)
    return out, lse


def forward_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  causal_alignment: str, scale: Optional[float], backend: Optional[str],
                  window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                  alibi_slopes: Optional[torch.Tensor] = None,
                  cu_seqlens_q: Optional[torch.Tensor] = None,
                  cu_seqlens_k: Optional[torch.Tensor] = None,
                  max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                  attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                  dropout_seed: int = 0, dropout_offset: int = 0,
                  checked_sequences: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): the custom op's body, which always computes lse (saved for backward)."""
    return run(q, k, v, causal, causal_alignment, scale, backend, with_lse=True,
               window_left=window_left, window_right=window_right, softcap=softcap,
               alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
               cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
               attn_mask=attn_mask, dropout_p=dropout_p, dropout_seed=dropout_seed,
               dropout_offset=dropout_offset, checked_sequences=checked_sequences)


attention_fwd = torch.library.custom_op("flashattn::attention_fwd", mutates_args=())(
    forward_eager)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, causal_alignment, scale, backend, window_left=-1,
                        window_right=-1, softcap=0.0, alibi_slopes=None, cu_seqlens_q=None,
                        cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                        attn_mask=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0,
                        checked_sequences=True):
    check(q, k, v, causal, causal_alignment, backend, alibi_slopes, cu_seqlens_q, cu_seqlens_k)
    if attn_mask is not None:
        check_mask(attn_mask, q, k)
    return (q.new_empty(_layout.out_shape(q.shape, v.shape)),
            q.new_empty(_layout.lse_shape(q.shape), dtype=torch.float32))


def backward_backend(backend, head_dim, head_dim_v=None):
    """The backend the autograd backward runs on: the forward's where it has a backward for
    these head dims (q's and k's, and v's where given: the limit bounds the wider, and a
    head_dim_v other than head_dim needs takes_backward_head_dim_v), else (None) the
    automatic choice, e.g. cuda_mma's backward after a cuda_wgmma forward. (A backward
    takes the dtypes of its forward.)"""
    if backend is None:
        return None
    entry = _backends.table(_library.library()).get(backend)
    if entry is None or not entry[1].has_backward:
        return None
    info = entry[1]
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    if head_dim_v != head_dim and not info.takes_backward_head_dim_v:
        return None
    limit = info.backward_max_head_dim
    return backend if limit is None or max(head_dim, head_dim_v) <= limit else None


def run_backward(dout, q, k, v, out, lse, causal, causal_alignment, scale, backend,
                 deterministic, window_left=-1, window_right=-1, softcap=0.0,
                 alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                 max_seqlen_k=None, attn_mask=None, dropout_p=0.0, dropout_seed=0,
                 dropout_offset=0, lib=None, checked_sequences=True, heads_first=False,
                 grads_like_inputs=False):
    """(dq, dk, dv), contiguous in q's dtype with the shapes of q, k and v: the gradients
    for dout (out's shape: q's with v's head_dim), the gradient with respect to the
    forward's out, given that forward's out and lse, and the forward's variants and layout.
    See flashattn.attention_backward and flashattn.varlen_attention_backward. heads_first:
    q, k, v, out and dout are (batch, heads, seqlen, head_dim), as in torch's SDPA; the
    gradients are then transposed views of (batch, seqlen, heads, head_dim) memory.
    grads_like_inputs (autograd's backward): each gradient in its input's memory order
    instead where the input is dense (gradient_buffer)."""
    mask, backend = check(q, k, v, causal, causal_alignment, backend, alibi_slopes,
                          cu_seqlens_q, cu_seqlens_k)
    geometry = None if attn_mask is None else check_mask(attn_mask, q, k, heads_first)
    variants, slopes = variant_values(window_left, window_right, softcap, alibi_slopes,
                                      attn_mask, geometry, dropout_p, dropout_seed,
                                      dropout_offset)
    _options.require_bool("deterministic", deterministic)
    for name, t in (("out", out), ("dout", dout)):
        _layout.require_4d(name, t.shape)
        if t.dtype not in DTYPES:
            raise _errors.InvalidArgumentError(
                f"{name}: dtype is {t.dtype}, must be q's dtype ({q.dtype})")
    _layout.require_lse(lse.shape, lse.dtype, lse.dtype == torch.float32,
                        seqlen_first(q.shape, heads_first))
    if lse.device != q.device:
        raise _errors.InvalidArgumentError(
            f"lse: device is {lse.device}, must be q's device ({q.device})")
    lse = lse.contiguous()
    sequences, prefix_sums = sequence_values(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                             max_seqlen_k, lib, checked_sequences)
    # The inputs, the slopes, the prefix sums and the mask stay referenced until the call
    # returns (see run()).
    views = [kernel_tensor(t, heads_first) for t in (q, k, v, out, dout)]
    grads = [gradient_buffer(t, heads_first, grads_like_inputs) for t in (q, k, v)]
    _library.backward(*(view for _, view in views), lse.data_ptr(),
                      *(view for _, view in grads), scale=scale, mask=mask, backend=backend,
                      deterministic=deterministic,
                      stream=current_stream(q.get_device()) if q.is_cuda else None,
                      variants=variants, sequences=sequences, lib=lib)
    return tuple(grad for grad, _ in grads)


def gradient_buffer(t, heads_first, like_input=False):
    """A new buffer for the gradient of input t, in t's dtype (q's: the backward takes the
    dtypes of its forward) and layout, and its view: contiguous (batch, seqlen, heads,
    head_dim) memory, the gradient a transposed view of it where heads_first. like_input
    (autograd's gradients): t's own memory order where t is dense and the kernels can write
    it (torch.empty_like), as PyTorch's SDPA gives its gradients, so that autograd takes the
    buffer as a leaf's .grad without copying it into the leaf's layout (three copies, a
    third of a small training call's GPU time, before)."""
    shape = seqlen_first(t.shape, heads_first)
    if like_input and t.numel():
        grad = torch.empty_like(t)
        strides = seqlen_first(grad.stride(), heads_first)
        if _layout.kernels_accept(shape, strides):
            return grad, tensor_view(grad, shape, strides)
    grad = t.new_empty(shape)
    # Row-major strides: torch's own where there are elements (read once, as kernel_tensor's).
    strides = grad.stride() if grad.numel() else _layout.contiguous_strides(shape)
    return (grad.transpose(1, 2) if heads_first else grad), tensor_view(grad, shape, strides)


def backward_eager(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, causal: bool, causal_alignment: str,
                   scale: Optional[float], backend: Optional[str], deterministic: bool,
                   window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                   alibi_slopes: Optional[torch.Tensor] = None,
                   cu_seqlens_q: Optional[torch.Tensor] = None,
                   cu_seqlens_k: Optional[torch.Tensor] = None,
                   max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                   attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                   dropout_seed: int = 0, dropout_offset: int = 0,
                   checked_sequences: bool = True
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv): the backward op's body."""
    return run_backward(dout, q, k, v, out, lse, causal, causal_alignment, scale, backend,
                        deterministic, window_left, window_right, softcap, alibi_slopes,
                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, attn_mask,
                        dropout_p, dropout_seed, dropout_offset,
                        checked_sequences=checked_sequences)


attention_bwd = torch.library.custom_op("flashattn::attention_bwd", mutates_args=())(
    backward_eager)


@attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, out, lse, causal, causal_alignment, scale, backend,
                        deterministic, window_left=-1, window_right=-1, softcap=0.0,
                        alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        max_seqlen_q=None, max_seqlen_k=None, attn_mask=None, dropout_p=0.0,
                        dropout_seed=0, dropout_offset=0, checked_sequences=True):
    check(q, k, v, causal, causal_alignment, backend, alibi_slopes, cu_seqlens_q, cu_seqlens_k)
    if attn_mask is not None:
        check_mask(attn_mask, q, k)
    return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, causal, causal_alignment, scale, backend, window_left, window_right, softcap,
     alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, attn_mask,
     dropout_p, dropout_seed, dropout_offset, checked_sequences) = inputs
    _bias.require_no_gradient(attn_mask is not None and attn_mask.requires_grad)
    out, lse = output
    ctx.mark_non_differentiable(lse)  # as the lse of torch's own fused attention
    ctx.save_for_backward(q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                          attn_mask)
    ctx.options = (causal, causal_alignment, scale,
                   backward_backend(backend, q.shape[-1], v.shape[-1]))
    ctx.variants = (window_left, window_right, softcap)
    # Checked, the forward checked the max_seqlen values and the backward need not again;
    # unchecked, the backward's grids are sized by them too.
    ctx.max_seqlen = (None, None) if checked_sequences else (max_seqlen_q, max_seqlen_k)
    ctx.checked_sequences = checked_sequences
    ctx.dropout = (dropout_p, dropout_seed, dropout_offset)  # regenerated by the backward
    ctx.heads_first = False  # the op's layout; _EagerAttention's may be SDPA's


def _backward(ctx, grad_out, grad_lse):
    """The op's gradients: one flashattn_backward for all three (the library computes dq, dk
    and dv in one pass), those of inputs that need none dropped; ALiBi's slopes and
    attn_mask get none. Bit-identical from run to run where
    torch.use_deterministic_algorithms(True) is in force. grad_out None (_EagerAttention
    makes no zeros for a missing gradient): out took no part in the loss, so none."""
    needs = ctx.needs_input_grad
    if grad_out is None:
        return (None,) * len(needs)
    q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, attn_mask = ctx.saved_tensors
    tensors = (grad_out, q, k, v, out)
    options = (*ctx.options, torch.are_deterministic_algorithms_enabled(), *ctx.variants,
               alibi_slopes, cu_seqlens_q, cu_seqlens_k, *ctx.max_seqlen, attn_mask,
               *ctx.dropout)
    if direct_call_is_safe(*tensors, alibi_slopes, cu_seqlens_q, cu_seqlens_k, attn_mask):
        dq, dk, dv = run_backward(*tensors, lse, *options,
                                  checked_sequences=ctx.checked_sequences,
                                  heads_first=ctx.heads_first, grads_like_inputs=True)
    else:
        if ctx.heads_first:  # the op takes (batch, seqlen, heads, head_dim) views
            tensors = tuple(t.transpose(1, 2) for t in tensors)
        dq, dk, dv = attention_bwd(*tensors, lse, *options,
                                   checked_sequences=ctx.checked_sequences)
        if ctx.heads_first:
            dq, dk, dv = (t.transpose(1, 2) for t in (dq, dk, dv))
    return (dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None,
            *[None] * (len(needs) - 3))


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


# attention_fwd's arguments after backend, (name, default) in its signature's order.
_FORWARD_OPTIONS = [(a.name, a.default)
                    for a in inspect.signature(forward_eager).parameters.values()][7:]


def forward_inputs(q, k, v, causal, causal_alignment, scale, backend, **options):
    """attention_fwd's arguments as one positional tuple (autograd.Function.apply takes no
    keywords), its defaults where options does not name them."""
    return (q, k, v, causal, causal_alignment, scale, backend,
            *(options.get(name, default) for name, default in _FORWARD_OPTIONS))


def run_op_inputs(inputs, heads_first):
    """(out, lse): attention_fwd's body on its positional inputs (forward_inputs' tuple), q,
    k, v and out (batch, heads, seqlen, head_dim) where heads_first. run takes the op's
    arguments after backend in the op's order (tested)."""
    q, k, v, causal, causal_alignment, scale, backend, *options = inputs
    return run(q, k, v, causal, causal_alignment, scale, backend, True, heads_first, None,
               *options)


class _EagerAttention(torch.autograd.Function):
    """attention_fwd's autograd for eager plain tensors, without the dispatcher: the op's own
    body, setup_context and backward, so the two ways are one computation. Through the op,
    an eager training call cost about 0.25 ms of host time more than the direct call (the
    dispatcher, and torch refilling the op's 20 defaults for setup_context on every call),
    more than a small layer's kernels; torch.compile, export and tensor subclasses still go
    through the op. Its inputs are q, k, v, their layout and the op's other arguments as one
    tuple: each argument of apply costs autograd host time, and SDPA's layout taken as it is
    saves the transposes' nodes in both directions. The tensors in the tuple (ALiBi's
    slopes, the prefix sums, attn_mask) get no gradient."""

    @staticmethod
    def forward(ctx, q, k, v, heads_first, options):
        inputs = (q, k, v, *options)
        output = run_op_inputs(inputs, heads_first)
        _setup_context(ctx, inputs, output)
        ctx.heads_first = heads_first
        ctx.set_materialize_grads(False)  # no zeros made for lse, which has no gradient
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        return _backward(ctx, grad_out, grad_lse)


def forward_with_autograd(inputs, heads_first=False):
    """(out, lse): attention_fwd on its positional inputs, through _EagerAttention where the
    call is eager on plain tensors (its tensor inputs read off the tuple itself), else
    through the registered op. heads_first: q, k, v and out are (batch, heads, seqlen,
    head_dim), as in torch's SDPA (transposed views for the op)."""
    if eager_tensors(*(x for x in inputs if isinstance(x, torch.Tensor))):
        return _EagerAttention.apply(*inputs[:3], heads_first, inputs[3:])
    if not heads_first:
        return attention_fwd(*inputs)
    out, lse = attention_fwd(*(t.transpose(1, 2) for t in inputs[:3]), *inputs[3:])
    return out.transpose(1, 2), lse


def attention(q, k, v, *, causal, causal_alignment, scale, backend, return_lse, window_left,
              window_right, softcap, alibi_slopes, attn_mask=None, sequences=None,
              dropout=None):
    """(out, lse) for torch q, k, v through the custom op; see flashattn.attention (out: q's
    shape, v's head_dim). Without return_lse, lse may be None. sequences: None (dense) or a
    variable-length batch's (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    checked), q, k, v then (1, total, heads, head_dim) and lse (1, heads_q, total_q) (see
    flashattn.varlen_attention). dropout: _dropout.dropout_values()'s (p, seed, offset), or
    None."""
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: is a {type(t).__module__}.{type(t).__qualname__}; q, k "
                            f"and v must all be torch tensors or all NumPy arrays")
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked = checked_extras(
        q, alibi_slopes, sequences)
    check_mask_argument(attn_mask, q, k)
    variants = (window_left, window_right, softcap, alibi_slopes)
    dropout_p, dropout_seed, dropout_offset = op_dropout(dropout)
    if direct_call_is_safe(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, attn_mask):
        return run(q, k, v, causal, causal_alignment, scale, backend, with_lse=return_lse,
                   window_left=window_left, window_right=window_right, softcap=softcap,
                   alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                   cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k, attn_mask=attn_mask, dropout_p=dropout_p,
                   dropout_seed=dropout_seed, dropout_offset=dropout_offset,
                   checked_sequences=checked)
    inputs = (q, k, v, causal, causal_alignment, scale, backend, *variants, cu_seqlens_q,
              cu_seqlens_k, max_seqlen_q, max_seqlen_k, attn_mask, dropout_p, dropout_seed,
              dropout_offset, checked)
    return forward_with_autograd(inputs)


def checked_extras(q, alibi_slopes, sequences):
    """The slopes and a variable-length batch's prefix sums checked before the op, whose
    schema takes only tensors for them; returns sequences as (cu_seqlens_q, cu_seqlens_k,
    max_seqlen_q, max_seqlen_k, checked), a dense batch's where it is None."""
    if alibi_slopes is not None:
        check_slopes(alibi_slopes, q)
    values = sequences or (None,) * 4 + (True,)
    check_prefix_sums(values[0], values[1], q)
    return values


def check_mask_argument(attn_mask, q, k, heads_first=False):
    """A caller's attn_mask, before the op (whose schema takes only a tensor for it): None,
    or a mask check_mask takes that needs no gradient where grad mode is on."""
    if attn_mask is None:
        return
    check_mask(attn_mask, q, k, heads_first)
    _bias.require_no_gradient(torch.is_grad_enabled() and attn_mask.requires_grad)


def eager_tensors(*tensors):
    """Whether the call is eager (not traced by torch.compile or export) on plain tensors
    (None: an absent optional one), which may skip the dispatcher."""
    if torch.compiler.is_compiling():
        return False
    return all(type(t) is torch.Tensor for t in tensors if t is not None)


def direct_call_is_safe(*tensors):
    """Whether an op's body may run without the dispatcher: eager plain tensors that need
    no autograd graph. The dispatcher costs about 0.08 ms per call, more than the kernel at
    small shapes; torch.compile, export and tensor subclasses (fake, functional) still go
    through the registered op."""
    return eager_tensors(*tensors) and not (
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors))


def sdpa(query, key, value, *, causal, scale, attn_mask=None, dropout=None):
    """out for (batch, heads, seqlen, head_dim) torch tensors (value's head_dim may differ;
    out takes it); see flashattn.sdpa. dropout: as attention's."""
    check_mask_argument(attn_mask, query, key, heads_first=True)
    dropout_p, dropout_seed, dropout_offset = op_dropout(dropout)
    if direct_call_is_safe(query, key, value, attn_mask):
        return run(query, key, value, causal, "top_left", scale, None, with_lse=False,
                   heads_first=True, attn_mask=attn_mask, dropout_p=dropout_p,
                   dropout_seed=dropout_seed, dropout_offset=dropout_offset)[0]
    # The mask is in the scores' order, (batch, heads, seqlen_q, seqlen_k), in either layout.
    inputs = forward_inputs(query, key, value, causal, "top_left", scale, None,
                            attn_mask=attn_mask, dropout_p=dropout_p, dropout_seed=dropout_seed,
                            dropout_offset=dropout_offset)
    return forward_with_autograd(inputs, heads_first=True)[0]


def attention_backward(q, k, v, out, dout, lse, *, causal, causal_alignment, scale, backend,
                       deterministic, window_left, window_right, softcap, alibi_slopes,
                       attn_mask=None, sequences=None, dropout=None):
    """(dq, dk, dv) for torch tensors; see flashattn.attention_backward. Eager calls on plain
    tensors run the body directly; torch.compile and tensor subclasses go through the op.
    sequences and dropout: as attention's."""
    for name, t in (("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: is a {type(t).__module__}.{type(t).__qualname__}; the "
                            f"inputs must all be torch tensors or all NumPy arrays")
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked = checked_extras(
        q, alibi_slopes, sequences)
    if attn_mask is not None:
        check_mask(attn_mask, q, k)
    args = (dout, q, k, v, out, lse, causal, causal_alignment, scale, backend, deterministic,
            window_left, window_right, softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
            max_seqlen_q, max_seqlen_k, attn_mask, *op_dropout(dropout))
    tensors = tuple(t for t in (q, k, v, out, dout, lse, alibi_slopes, cu_seqlens_q,
                                cu_seqlens_k, attn_mask) if t is not None)
    if torch.compiler.is_compiling() or any(type(t) is not torch.Tensor for t in tensors):
        return attention_bwd(*args, checked)
    return run_backward(*args, checked_sequences=checked)
