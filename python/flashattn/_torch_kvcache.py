"""attention_with_kvcache on PyTorch tensors, as two custom operators with fake
implementations, so that torch.compile (fullgraph=True) traces a decoding step:

    torch.ops.flashattn.kvcache_fwd          the cache only read (no k and v to append)
    torch.ops.flashattn.kvcache_append_fwd   k and v appended: mutates k_cache and v_cache

Two ops rather than one, so that a step that appends nothing declares no mutation (under
torch.compile a mutated input is functionalized, which a read-only step need not pay for).
Both return (out, lse). Inference only: neither has an autograd formula, and a call whose
inputs require grad (with grad mode on) is refused before any op runs. Plain eager calls run
the ops' bodies directly, as flashattn.attention's do (_torch_op.direct_call_is_safe). On
CUDA they run on the current stream; an unchecked call (checked=False) never waits for the
host, so it can be captured in a CUDA graph.
"""
from typing import Optional

import torch

from . import _abi, _cache, _errors, _layout, _options
from ._torch_op import (DTYPES, check_slopes, check_tensor, current_stream,
                        direct_call_is_safe, kernel_tensor)


def check_int32(name, t, q, what):
    """cache_seqlens or block_table: an int32 torch tensor on q's device; what: the other
    values it may be, for the message."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: is a {_options.type_name(t)}; with torch inputs it must be a "
                        f"torch tensor (torch.int32, on q's device) or {what}")
    if t.dtype == torch.int32 and t.device != q.device:
        raise _errors.InvalidArgumentError(
            f"{name}: device is {t.device}, must be q's device ({q.device})")


def check(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes):
    """What the library cannot check: the tensors' types and ranks, and the lengths', block
    table's and slopes' dtype, shape and device. cache_seqlens: a tensor, an int or None."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if t is not None or name not in ("k", "v"):
            check_tensor(name, t)
    batch = q.shape[0]
    if block_table is not None:
        check_int32("block_table", block_table, q, "None")
        _cache.require_block_table(block_table.shape, block_table.dtype,
                                   block_table.dtype == torch.int32, batch)
    if isinstance(cache_seqlens, torch.Tensor):
        check_int32("cache_seqlens", cache_seqlens, q, "an int")
        _cache.require_lengths(cache_seqlens.shape, cache_seqlens.dtype,
                               cache_seqlens.dtype == torch.int32, batch)
    elif cache_seqlens is not None and not isinstance(cache_seqlens, (int, torch.SymInt)):
        raise TypeError(f"cache_seqlens: is a {_options.type_name(cache_seqlens)}; with torch "
                        f"inputs it must be an int or a torch tensor (torch.int32, on q's "
                        f"device)")
    if alibi_slopes is not None:
        check_slopes(alibi_slopes, q)


def lengths_tensor(cache_seqlens, q, k_cache, block_table):
    """cache_seqlens as the int32 (batch,) tensor the library reads: an int fills one on q's
    device (a fill kernel on CUDA: no host wait, capturable in a CUDA graph), None with every
    sequence at the capacity; a tensor is made contiguous."""
    if isinstance(cache_seqlens, torch.Tensor):
        return cache_seqlens.contiguous()
    if cache_seqlens is None:
        cache_seqlens = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
    return torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)


def cache_view(t):
    """k_cache's or v_cache's view: the tensor itself, never copied (the call writes it);
    the library rejects strides it cannot use. A tensor without elements is never read."""
    shape = tuple(t.shape)
    strides = _layout.contiguous_strides(shape) if t.numel() == 0 else tuple(t.stride())
    device_index = t.get_device()  # -1 on the CPU
    return _abi.view(t.data_ptr(), DTYPES[t.dtype], shape, strides,
                     _abi.CUDA if device_index >= 0 else _abi.CPU, max(device_index, 0))


def run(q, k_cache, v_cache, k, v, cache_seqlens, block_table, scale, causal, window_left,
        window_right, softcap, alibi_slopes, num_splits, checked, backend, with_lse,
        already_checked=False):
    """(out, lse) of one KV-cache call, lse None unless with_lse (out: q's shape with
    v_cache's head_dim); see flashattn.attention_with_kvcache. cache_seqlens: an int32
    tensor, an int or None. already_checked: the caller ran check() on these arguments (a
    decoding step's host time is worth the few microseconds)."""
    if not already_checked:
        check(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes)
    mask = "causal_bottom_right" if _options.require_bool("causal", causal) else "none"
    backend = _options.backend_value(backend)
    lengths = lengths_tensor(cache_seqlens, q, k_cache, block_table)
    table = None if block_table is None else block_table.contiguous()
    slopes = None if alibi_slopes is None else alibi_slopes.contiguous()
    # Every tensor stays referenced until the call returns: the views hold bare addresses.
    q, q_view = kernel_tensor(q)
    new_views = (_abi.NO_TENSOR, _abi.NO_TENSOR)
    if k is not None:
        (k, k_view), (v, v_view) = kernel_tensor(k), kernel_tensor(v)
        new_views = (k_view, v_view)
    out, out_view = kernel_tensor(torch.empty(_layout.out_shape(q.shape, v_cache.shape),
                                              dtype=q.dtype, device=q.device))
    lse = (torch.empty(_layout.lse_shape(q.shape), dtype=torch.float32, device=q.device)
           if with_lse else None)
    _cache.forward(q_view, cache_view(k_cache), cache_view(v_cache), out_view,
                   lse=None if lse is None else lse.data_ptr(), scale=scale, mask=mask,
                   backend=backend,
                   stream=current_stream(q_view[-1]) if q.is_cuda else None,
                   variants=(window_left, window_right, softcap,
                             0 if slopes is None else slopes.data_ptr()),
                   kv_cache=(lengths.data_ptr(), *new_views,
                             0 if table is None else table.data_ptr(),
                             0 if table is None else table.shape[1], int(checked), num_splits))
    return out, lse


def kvcache_eager(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  cache_seqlens: torch.Tensor, block_table: Optional[torch.Tensor],
                  scale: Optional[float], causal: bool, window_left: int, window_right: int,
                  softcap: float, alibi_slopes: Optional[torch.Tensor], num_splits: int,
                  checked: bool, backend: Optional[str]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) over a cache that is only read: kvcache_fwd's body."""
    return run(q, k_cache, v_cache, None, None, cache_seqlens, block_table, scale, causal,
               window_left, window_right, softcap, alibi_slopes, num_splits, checked, backend,
               with_lse=True)


def kvcache_append_eager(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         k: torch.Tensor, v: torch.Tensor, cache_seqlens: torch.Tensor,
                         block_table: Optional[torch.Tensor], scale: Optional[float],
                         causal: bool, window_left: int, window_right: int, softcap: float,
                         alibi_slopes: Optional[torch.Tensor], num_splits: int, checked: bool,
                         backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) after writing k and v into the cache: kvcache_append_fwd's body."""
    return run(q, k_cache, v_cache, k, v, cache_seqlens, block_table, scale, causal,
               window_left, window_right, softcap, alibi_slopes, num_splits, checked, backend,
               with_lse=True)


kvcache_fwd = torch.library.custom_op("flashattn::kvcache_fwd", mutates_args=())(kvcache_eager)
kvcache_append_fwd = torch.library.custom_op(
    "flashattn::kvcache_append_fwd", mutates_args=("k_cache", "v_cache"))(kvcache_append_eager)


def fake_outputs(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes):
    check(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes)
    return (q.new_empty(_layout.out_shape(q.shape, v_cache.shape)),
            q.new_empty(_layout.lse_shape(q.shape), dtype=torch.float32))


@kvcache_fwd.register_fake
def _kvcache_fwd_fake(q, k_cache, v_cache, cache_seqlens, block_table, scale, causal,
                      window_left, window_right, softcap, alibi_slopes, num_splits, checked,
                      backend):
    return fake_outputs(q, k_cache, v_cache, None, None, cache_seqlens, block_table,
                        alibi_slopes)


@kvcache_append_fwd.register_fake
def _kvcache_append_fwd_fake(q, k_cache, v_cache, k, v, cache_seqlens, block_table, scale,
                             causal, window_left, window_right, softcap, alibi_slopes,
                             num_splits, checked, backend):
    return fake_outputs(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes)


def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, *, scale,
                           causal, backend, return_lse, num_splits, checked, window_left,
                           window_right, softcap, alibi_slopes):
    """(out, lse or None) for torch tensors; see flashattn.attention_with_kvcache. Eager
    calls on plain tensors run the ops' bodies directly; torch.compile and tensor subclasses
    go through the ops. cache_seqlens: None, an int or a tensor; the options already checked
    (flashattn._kvcache)."""
    check(q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes)
    tensors = [t for t in (q, k_cache, v_cache, k, v, alibi_slopes) if t is not None]
    if torch.is_grad_enabled():
        for name, t in zip(("q", "k_cache", "v_cache", "k", "v"), (q, k_cache, v_cache, k, v)):
            if t is not None and t.requires_grad:
                raise _errors.UnsupportedError(
                    f"{name}: requires grad, but attention_with_kvcache has no backward "
                    f"(inference only); call it under torch.no_grad() or "
                    f"torch.inference_mode(), or pass detached tensors")
    options = (scale, causal, window_left, window_right, softcap, alibi_slopes, num_splits,
               checked, backend)
    if direct_call_is_safe(*tensors, *(t for t in (cache_seqlens, block_table)
                                       if isinstance(t, torch.Tensor))):
        return run(q, k_cache, v_cache, k, v, cache_seqlens, block_table, *options,
                   with_lse=return_lse, already_checked=True)
    # The ops take the lengths as a tensor: an int (or None) becomes one here.
    lengths = lengths_tensor(cache_seqlens, q, k_cache, block_table)
    if k is None:
        return kvcache_fwd(q, k_cache, v_cache, lengths, block_table, *options)
    return kvcache_append_fwd(q, k_cache, v_cache, k, v, lengths, block_table, *options)
