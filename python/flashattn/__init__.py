"""flashattn: exact attention softmax(Q·Kᵀ·scale)·V, FlashAttention-style, for NumPy arrays
and PyTorch tensors, through libflashattn's C ABI.

    out = flashattn.attention(q, k, v, causal=True)     # (batch, seqlen, heads, head_dim)
    out = flashattn.attention(q, k, v, causal=True, window_size=(1024, 0), softcap=30.0,
                              alibi_slopes=slopes)       # FlashAttention's variant keywords
    out = flashattn.sdpa(query, key, value, is_causal=True)  # torch SDPA's signature
    out = flashattn.sdpa(query, key, value, attn_mask=mask)  # bool or float, broadcast
    out.sum().backward()                                 # autograd on torch tensors
    dq, dk, dv = flashattn.attention_backward(q, k, v, out, dout, lse)  # the raw backward
    out = flashattn.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)
                                                         # packed: (total, heads, head_dim)
    out = flashattn.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens,
                                           causal=True)  # decoding over a KV cache
    out = flashattn.ring_attention(q_part, k_part, v_part, causal=True)
                                 # one sequence over a torch.distributed group (zigzag parts)

The library is loaded on first use from $FLASHATTN_LIBRARY, else from this package;
flashattn.backends() lists its backends.
"""
import importlib

from ._attention import attention, attention_backward
from ._backends import Backend, backends
from ._dropout import dropout_mask
from ._errors import CudaError, Error, InternalError, InvalidArgumentError, UnsupportedError
from ._kvcache import attention_with_kvcache
from ._sdpa import sdpa
from ._varlen import varlen_attention, varlen_attention_backward

# Context parallelism needs torch (torch.distributed): imported on first use, so that the
# package still imports without torch.
_TORCH_ONLY = {"ring_attention": ("_ring_attention", "ring_attention"),
               "zigzag_shard": ("_zigzag", "shard"), "zigzag_unshard": ("_zigzag", "unshard"),
               "zigzag_shard_packed": ("_zigzag", "shard_packed"),
               "zigzag_unshard_packed": ("_zigzag", "unshard_packed")}


def __getattr__(name):
    if name not in _TORCH_ONLY:
        raise AttributeError(f"module 'flashattn' has no attribute {name!r}")
    module, attribute = _TORCH_ONLY[name]
    return getattr(importlib.import_module(f".{module}", __name__), attribute)


__all__ = [
    "attention",
    "attention_backward",
    "varlen_attention",
    "varlen_attention_backward",
    "attention_with_kvcache",
    "ring_attention",
    "zigzag_shard",
    "zigzag_unshard",
    "zigzag_shard_packed",
    "zigzag_unshard_packed",
    "sdpa",
    "dropout_mask",
    "backends",
    "Backend",
    "Error",
    "InvalidArgumentError",
    "UnsupportedError",
    "CudaError",
    "InternalError",
]
