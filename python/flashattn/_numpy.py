"""attention() on NumPy arrays: the CPU backends, called on the arrays' own memory."""
import numpy as np

from . import _abi, _bias, _cache, _dropout, _errors, _layout, _library, _options, _sequences

DTYPES = {np.dtype(np.float32): _abi.F32, np.dtype(np.float16): _abi.F16}
MASK_TYPES = {np.dtype(np.bool_): _abi.BIAS_BOOL, np.dtype(np.float32): _abi.BIAS_F32,
              np.dtype(np.float16): _abi.BIAS_F16}


def _element_strides(a):
    """a's strides in elements, or None where a byte stride is not a whole element."""
    item = a.itemsize
    if any(s % item for s in a.strides):
        return None
    return tuple(s // item for s in a.strides)


def kernel_array(name, a):
    """a itself when the kernels can read it in place, else one C-ordered copy; and its view.

    Copies: negative or non-element strides, head_dim not contiguous, unaligned data. An
    array without elements (batch or seqlen 0) is never read: its view gets row-major strides.
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: is a {type(a).__module__}.{type(a).__qualname__}; the "
                        f"inputs must all be NumPy arrays or all torch tensors")
    _layout.require_4d(name, a.shape)
    if a.dtype not in DTYPES:
        raise _errors.InvalidArgumentError(
            f"{name}: dtype is {a.dtype}, must be float32 or float16 for NumPy arrays")
    if a.size == 0:
        return a, _abi.view(a.ctypes.data, DTYPES[a.dtype], a.shape,
                            _layout.contiguous_strides(a.shape), _abi.CPU)
    strides = _element_strides(a)
    if strides is None or not a.flags.aligned or not _layout.kernels_accept(a.shape, strides):
        a = np.require(a, requirements=("C_CONTIGUOUS", "ALIGNED"))
        strides = _element_strides(a)
    return a, _abi.view(a.ctypes.data, DTYPES[a.dtype], a.shape, strides, _abi.CPU)


def slopes_array(alibi_slopes, heads_q):
    """alibi_slopes as the library reads them (float32 (heads_q,), contiguous: a strided array
    is copied), or None."""
    if alibi_slopes is None:
        return None
    if not isinstance(alibi_slopes, np.ndarray):
        raise TypeError(f"alibi_slopes: is a {_options.type_name(alibi_slopes)}; with NumPy "
                        f"inputs it must be a NumPy array (float32, one slope per query head) "
                        f"or None")
    _layout.require_slopes(alibi_slopes.shape, alibi_slopes.dtype,
                           alibi_slopes.dtype == np.float32, heads_q)
    return np.require(alibi_slopes, requirements=("C_CONTIGUOUS", "ALIGNED"))


def mask_array(attn_mask, q_shape, seqlen_k):
    """attn_mask as the library reads it (the array itself; one C-ordered copy where its
    strides are negative or not whole elements, or its data unaligned) and its
    _abi.bias_view(), broadcast to (batch, heads_q, seqlen_q, seqlen_k) by strides; (None,
    NO_BIAS) without a mask. A bool array is a mask (True: attend), a float32 or float16 one
    a bias added to the scaled scores."""
    if attn_mask is None:
        return None, _abi.NO_BIAS
    if not isinstance(attn_mask, np.ndarray):
        raise TypeError(f"attn_mask: is a {_options.type_name(attn_mask)}; with NumPy inputs "
                        f"it must be a NumPy array (bool, float32 or float16) or None")
    if attn_mask.dtype not in MASK_TYPES:
        raise _errors.InvalidArgumentError(
            f"attn_mask: dtype is {attn_mask.dtype}, must be bool (a mask, True: attend), "
            f"float32 or float16 (a bias added to the scores)")
    batch, seqlen_q, heads_q, _ = q_shape
    target = (batch, heads_q, seqlen_q, seqlen_k)
    strides = _element_strides(attn_mask)
    if strides is None or min(strides, default=0) < 0 or not attn_mask.flags.aligned:
        attn_mask = np.require(attn_mask, requirements=("C_CONTIGUOUS", "ALIGNED"))
        strides = _element_strides(attn_mask)
    shape, strides = _bias.broadcast(attn_mask.shape, strides, target)
    return attn_mask, _abi.bias_view(attn_mask.ctypes.data, MASK_TYPES[attn_mask.dtype], shape,
                                      strides)


def variant_values(window_left, window_right, softcap, slopes, bias=_abi.NO_BIAS,
                   dropout=None):
    """The (window_left, window_right, softcap, slopes address, bias view, dropout) the
    library takes; dropout: _dropout.dropout_values()'s (p, seed, offset), or None."""
    return (window_left, window_right, softcap, 0 if slopes is None else slopes.ctypes.data,
            bias, _dropout.library_dropout(dropout))


def prefix_sums(sequences):
    """A variable-length batch's prefix sums as the library reads them, and the
    flashattn_sequences values over them; (None, None) for a dense batch (sequences None).

    sequences: (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked), the
    max_seqlen values already ints or None (_sequences.max_seqlen_value). Host arrays are
    always checked (reading them waits for nothing), so checked is not passed on. A strided
    array is copied."""
    if sequences is None:
        return None, None
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, _ = sequences
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, np.ndarray):
            raise TypeError(f"{name}: is a {_options.type_name(cu)}; with NumPy inputs it "
                            f"must be a NumPy array (int32)")
    _sequences.require_prefix_sums(cu_seqlens_q, cu_seqlens_k, lambda cu: cu.dtype,
                                   lambda cu: cu.dtype == np.int32)
    if not _library.knows_max_seqlen(_library.library()):
        _sequences.require_longest("max_seqlen_q", max_seqlen_q, cu_seqlens_q, "cu_seqlens_q")
        _sequences.require_longest("max_seqlen_k", max_seqlen_k, cu_seqlens_k, "cu_seqlens_k")
    kept = [np.require(cu, requirements=("C_CONTIGUOUS", "ALIGNED"))
            for cu in (cu_seqlens_q, cu_seqlens_k)]
    return kept, (kept[0].ctypes.data, kept[1].ctypes.data, len(kept[0]) - 1, max_seqlen_q,
                  max_seqlen_k)


def attention(q, k, v, *, causal, causal_alignment, scale, backend, return_lse, window_left,
              window_right, softcap, alibi_slopes, attn_mask=None, sequences=None,
              dropout=None):
    """out (and lse, else None) for NumPy q, k, v; see flashattn.attention. out has q's shape
    but v's head_dim. sequences: None (dense) or a variable-length batch's (cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked), q, k, v then (1, total, heads,
    head_dim) (see flashattn.varlen_attention)."""
    mask = _options.mask_name(causal, causal_alignment)
    backend = _options.backend_value(backend)
    # The arrays stay referenced until the call returns: the views hold bare addresses.
    (q, qv), (k, kv), (v, vv) = (kernel_array(n, a) for n, a in (("q", q), ("k", k), ("v", v)))
    slopes = slopes_array(alibi_slopes, q.shape[2])
    attn_mask, bias = mask_array(attn_mask, q.shape, k.shape[1])
    kept, sequence_values = prefix_sums(sequences)
    out, out_view = kernel_array("out", np.empty(_layout.out_shape(q.shape, v.shape), q.dtype))
    lse = np.empty(_layout.lse_shape(q.shape), np.float32) if return_lse else None
    _library.forward(qv, kv, vv, out_view, lse=None if lse is None else lse.ctypes.data,
                     scale=scale, mask=mask, backend=backend,
                     variants=variant_values(window_left, window_right, softcap, slopes, bias,
                                             dropout),
                     sequences=sequence_values)
    return out, lse


def attention_backward(q, k, v, out, dout, lse, *, causal, causal_alignment, scale, backend,
                       deterministic, window_left, window_right, softcap, alibi_slopes,
                       attn_mask=None, sequences=None, dropout=None):
    """(dq, dk, dv) for NumPy arrays; see flashattn.attention_backward. sequences: as
    attention's (lse then (1, heads_q, total_q)); dropout: the forward's (p, seed, offset),
    or None."""
    mask = _options.mask_name(causal, causal_alignment)
    backend = _options.backend_value(backend)
    _options.require_bool("deterministic", deterministic)
    arrays = [kernel_array(n, a) for n, a in (("q", q), ("k", k), ("v", v), ("out", out),
                                               ("dout", dout))]
    (q, qv), (k, kv), (v, vv), (out, ov), (dout, dov) = arrays
    slopes = slopes_array(alibi_slopes, q.shape[2])
    attn_mask, bias = mask_array(attn_mask, q.shape, k.shape[1])
    if not isinstance(lse, np.ndarray):
        raise TypeError(f"lse: is a {type(lse).__module__}.{type(lse).__qualname__}; the "
                        f"inputs must all be NumPy arrays or all torch tensors")
    _layout.require_lse(lse.shape, lse.dtype, lse.dtype == np.float32, q.shape)
    lse = np.require(lse, requirements=("C_CONTIGUOUS", "ALIGNED"))
    kept, sequence_values = prefix_sums(sequences)
    grads = [kernel_array(n, np.empty(t.shape, q.dtype)) for n, t in (("dq", q), ("dk", k),
                                                                     ("dv", v))]
    (dq, dqv), (dk, dkv), (dv, dvv) = grads
    _library.backward(qv, kv, vv, ov, dov, lse.ctypes.data, dqv, dkv, dvv, scale=scale,
                      mask=mask, backend=backend, deterministic=deterministic,
                      variants=variant_values(window_left, window_right, softcap, slopes,
                                              bias, dropout),
                      sequences=sequence_values)
    return dq, dk, dv


def cache_array(name, a, written):
    """A KV cache's k or v as the library reads (and, with written, writes) it: the array
    itself, never copied; strides that are not whole elements and unaligned data, which no
    view can describe, are refused here, other strides by the library."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: is a {_options.type_name(a)}; the inputs must all be NumPy "
                        f"arrays or all torch tensors")
    _layout.require_4d(name, a.shape)
    if a.dtype not in DTYPES:
        raise _errors.InvalidArgumentError(
            f"{name}: dtype is {a.dtype}, must be float32 or float16 for NumPy arrays")
    if written and not a.flags.writeable:
        raise _errors.InvalidArgumentError(
            f"{name}: is read-only, but k and v are appended to it (the cache is written in "
            f"place)")
    if a.size == 0:
        return _abi.view(a.ctypes.data, DTYPES[a.dtype], a.shape,
                         _layout.contiguous_strides(a.shape), _abi.CPU)
    strides = _element_strides(a)
    if strides is None or not a.flags.aligned:
        raise _errors.InvalidArgumentError(
            f"{name}: strides {a.strides} bytes (or its alignment) are not whole elements; "
            f"the cache is read and written in place, never copied")
    return _abi.view(a.ctypes.data, DTYPES[a.dtype], a.shape, strides, _abi.CPU)


def int32_array(name, a, what):
    """cache_seqlens or block_table, which must be a NumPy array (its dtype and shape the
    caller checks); what: the other values it may be, for the message."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: is a {_options.type_name(a)}; with NumPy inputs it must be "
                        f"a NumPy array (int32) or {what}")
    return a


def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, *, scale,
                           causal, backend, return_lse, num_splits, checked, window_left,
                           window_right, softcap, alibi_slopes):
    """(out, lse or None) for NumPy arrays; see flashattn.attention_with_kvcache.
    cache_seqlens: None (full caches), an int or an array; the options already checked
    (flashattn._kvcache)."""
    mask = "causal_bottom_right" if causal else "none"
    backend = _options.backend_value(backend)
    q, qv = kernel_array("q", q)
    batch = q.shape[0]
    appended = k is not None
    k_cache_view, v_cache_view = (cache_array(n, a, appended)
                                  for n, a in (("k_cache", k_cache), ("v_cache", v_cache)))
    table, pages_per_sequence = None, 0
    if block_table is not None:
        table = int32_array("block_table", block_table, "None")
        _cache.require_block_table(table.shape, table.dtype, table.dtype == np.int32, batch)
        table = np.require(table, requirements=("C_CONTIGUOUS", "ALIGNED"))
        pages_per_sequence = table.shape[1]
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        full = k_cache.shape[1] * (pages_per_sequence if table is not None else 1)
        lengths = np.full(batch, full if cache_seqlens is None else cache_seqlens, np.int32)
    else:
        lengths = int32_array("cache_seqlens", cache_seqlens, "an int")
        _cache.require_lengths(lengths.shape, lengths.dtype, lengths.dtype == np.int32, batch)
        lengths = np.require(lengths, requirements=("C_CONTIGUOUS", "ALIGNED"))
    new_views = (_abi.NO_TENSOR, _abi.NO_TENSOR)
    if appended:
        (k, kv), (v, vv) = (kernel_array(n, a) for n, a in (("k", k), ("v", v)))
        new_views = (kv, vv)
    slopes = slopes_array(alibi_slopes, q.shape[2])
    out, out_view = kernel_array("out", np.empty(_layout.out_shape(q.shape, v_cache.shape),
                                                  q.dtype))
    lse = np.empty(_layout.lse_shape(q.shape), np.float32) if return_lse else None
    # Every array stays referenced until the call returns: the views hold bare addresses.
    _cache.forward(qv, k_cache_view, v_cache_view, out_view,
                   lse=None if lse is None else lse.ctypes.data, scale=scale, mask=mask,
                   backend=backend,
                   variants=variant_values(window_left, window_right, softcap, slopes),
                   kv_cache=(lengths.ctypes.data, *new_views,
                             0 if table is None else table.ctypes.data, pages_per_sequence,
                             int(checked), num_splits))
    return out, lse
