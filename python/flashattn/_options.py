"""attention()'s and sdpa()'s options, checked and turned into what the library takes.

The rules for the arguments sdpa shares with torch.nn.functional.scaled_dot_product_attention
are PyTorch's (a flag must be a bool, a number a real number); attention() takes the same.
"""
import math
import sys

import numpy as np

from . import _backends, _errors

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
FLOAT32_MAX = float(np.finfo(np.float32).max)


def type_name(x):
    """x's type as an error message names it: "str", "numpy.ndarray", "torch.Tensor"."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def require_bool(name, flag):
    """flag itself if it is a bool; else TypeError, as PyTorch raises for its bool arguments
    (an int, a NumPy bool or a tensor is not one)."""
    if not isinstance(flag, bool):
        raise TypeError(f"{name}: is a {type_name(flag)}, must be a bool (True or False)")
    return flag


def _torch_number(x):
    """Whether x is a torch value PyTorch takes for a float argument: a 0-d tensor that needs
    no gradient, or a symbolic int or float (torch.compile). torch is not imported here:
    without it loaded, x cannot be one."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return True
    return isinstance(x, torch.Tensor) and x.dim() == 0 and not x.requires_grad


def real_number(name, x):
    """x as a Python float, taking what PyTorch takes for a float argument: a Python int,
    float or bool, a NumPy number or bool, a 0-d tensor without gradient. Anything else (a
    string, a Fraction, an array, a 1-element tensor) raises TypeError, as in PyTorch."""
    if isinstance(x, (int, float)):
        return float(x)  # OverflowError for an int beyond float's range, as in PyTorch
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":
        return float(x.real)  # PyTorch, too, drops a NumPy complex's imaginary part
    if _torch_number(x):
        return float(x.item() if hasattr(x, "item") else x)
    raise TypeError(f"{name}: is a {type_name(x)}, must be a float (or int)")


def float32_number(name, x):
    """x as a Python float (real_number) that float32 holds: a finite value beyond its range
    raises InvalidArgumentError (the library computes in float32). NaN and Inf go on to the
    library, which says what it takes."""
    value = real_number(name, x)
    if math.isfinite(value) and abs(value) > FLOAT32_MAX:
        raise _errors.InvalidArgumentError(
            f"{name}: is {value!r}, beyond float32's range (the library computes in float32); "
            f"must be finite")
    return value


def scale_value(scale):
    """scale as a Python float, or None (1/sqrt(head_dim)).

    Any real number PyTorch takes for its scale (real_number) and any finite value, negative
    and zero included. NaN, ±Inf and values beyond float32's range (the library computes with
    a float32 scale) raise InvalidArgumentError: PyTorch computes with them (NaN or 0 rows);
    flashattn refuses them.
    """
    if scale is None:
        return None
    return float32_number("scale", scale)


def softcap_value(softcap):
    """softcap as a Python float: 0 (none) or a finite value > 0, the library checks which;
    a real number as real_number takes one."""
    return float32_number("softcap", softcap)


INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def is_symbolic(x):
    """Whether x is a symbolic int (torch.compile), whose value is the library's to check."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.SymInt)


def int_or_symbolic(x, described, meaning):
    """x as an int if it is a Python or NumPy int (not a bool), x itself if it is a symbolic
    int; else TypeError "{described} a <type>, must be an int ({meaning})"."""
    if is_symbolic(x):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{described} a {type_name(x)}, must be an int ({meaning})")
    return int(x)


def _window_side(side, x):
    """One side of window_size as an int32, or a symbolic int (torch.compile). A side wider
    than int32 (and so than any sequence) is the same window as int32's widest; the library
    rejects sides below -1 itself."""
    x = int_or_symbolic(x, f"window_size: its {side} side is", f"-1: no {side} end")
    return x if is_symbolic(x) else max(INT32_MIN, min(INT32_MAX, x))


def window_sides(window_size):
    """(left, right) of window_size=(left, right), FlashAttention's keyword: query i sees keys
    i + off - left .. i + off + right (off: the causal alignment's offset, seqlen_k - seqlen_q
    without a causal mask); -1 leaves a side open, (-1, -1) is no window."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size: is {window_size!r}, must be a (left, right) pair of "
                        f"ints ((-1, -1): no window)")
    return _window_side("left", window_size[0]), _window_side("right", window_size[1])


def mask_name(causal, causal_alignment):
    """The flashattn_mask name for `causal` (a bool) with its alignment.

    top_left: query i sees keys j <= i (PyTorch's is_causal). bottom_right: j <= i +
    seqlen_k - seqlen_q, the last query sees every key (FlashAttention >= 2.1).
    """
    require_bool("causal", causal)
    if causal_alignment not in CAUSAL_ALIGNMENTS:
        raise _errors.InvalidArgumentError(
            f"causal_alignment: is {causal_alignment!r}, must be one of {CAUSAL_ALIGNMENTS}")
    return f"causal_{causal_alignment}" if causal else "none"


def backend_value(backend):
    """The flashattn_backend value for backend=: None or "auto" (chosen from the tensors'
    device and dtype), or a name from flashattn.backends(), the loaded library's table."""
    if backend is None:
        return _backends.AUTO
    if isinstance(backend, str):
        try:
            return _backends.value(backend)
        except KeyError:
            pass
    raise _errors.InvalidArgumentError(
        f"backend: is {backend!r}, must be None or one of {('auto',) + _backends.names()} "
        f"(flashattn.backends() describes them)")
