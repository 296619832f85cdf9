"""attention()'s keyword options, checked and turned into the library's names."""
from . import _abi, _errors

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def mask_name(causal, causal_alignment):
    """The flashattn_mask name for `causal` with its alignment.

    top_left: query i sees keys j <= i (PyTorch's is_causal). bottom_right: j <= i +
    seqlen_k - seqlen_q, the last query sees every key (FlashAttention >= 2.1).
    """
    if causal_alignment not in CAUSAL_ALIGNMENTS:
        raise _errors.InvalidArgumentError(
            f"causal_alignment: is {causal_alignment!r}, must be one of {CAUSAL_ALIGNMENTS}")
    return f"causal_{causal_alignment}" if causal else "none"


def backend_name(backend):
    """The flashattn_backend name; None chooses from the tensors' device."""
    if backend is None:
        return "auto"
    if backend not in _abi.BACKENDS:
        raise _errors.InvalidArgumentError(
            f"backend: is {backend!r}, must be None or one of {tuple(_abi.BACKENDS)}")
    return backend


def scale_value(scale):
    """scale as a Python float (the library checks it is finite and > 0), or None."""
    return None if scale is None else float(scale)
