"""attention() on NumPy arrays: the CPU backends, called on the arrays' own memory."""
import numpy as np

from . import _abi, _errors, _layout, _library, _options

DTYPES = {np.dtype(np.float32): _abi.F32, np.dtype(np.float16): _abi.F16}


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


def attention(q, k, v, *, causal, causal_alignment, scale, backend, return_lse):
    """out (and lse, else None) for NumPy q, k, v; see flashattn.attention."""
    mask = _options.mask_name(causal, causal_alignment)
    backend = _options.backend_value(backend)
    # The arrays stay referenced until the call returns: the views hold bare addresses.
    (q, qv), (k, kv), (v, vv) = (kernel_array(n, a) for n, a in (("q", q), ("k", k), ("v", v)))
    out, out_view = kernel_array("out", np.empty(q.shape, q.dtype))
    lse = np.empty(_layout.lse_shape(q.shape), np.float32) if return_lse else None
    _library.forward(qv, kv, vv, out_view, lse=None if lse is None else lse.ctypes.data,
                     scale=scale, mask=mask, backend=backend)
    return out, lse


def attention_backward(q, k, v, out, dout, lse, *, causal, causal_alignment, scale, backend,
                       deterministic):
    """(dq, dk, dv) for NumPy arrays; see flashattn.attention_backward."""
    mask = _options.mask_name(causal, causal_alignment)
    backend = _options.backend_value(backend)
    _options.require_bool("deterministic", deterministic)
    arrays = [kernel_array(n, a) for n, a in (("q", q), ("k", k), ("v", v), ("out", out),
                                               ("dout", dout))]
    (q, qv), (k, kv), (v, vv), (out, ov), (dout, dov) = arrays
    if not isinstance(lse, np.ndarray):
        raise TypeError(f"lse: is a {type(lse).__module__}.{type(lse).__qualname__}; the "
                        f"inputs must all be NumPy arrays or all torch tensors")
    _layout.require_lse(lse.shape, lse.dtype, lse.dtype == np.float32, q.shape)
    lse = np.require(lse, requirements=("C_CONTIGUOUS", "ALIGNED"))
    grads = [kernel_array(n, np.empty(t.shape, q.dtype)) for n, t in (("dq", q), ("dk", k),
                                                                     ("dv", v))]
    (dq, dqv), (dk, dkv), (dv, dvv) = grads
    _library.backward(qv, kv, vv, ov, dov, lse.ctypes.data, dqv, dkv, dvv, scale=scale,
                      mask=mask, backend=backend, deterministic=deterministic)
    return dq, dk, dv
