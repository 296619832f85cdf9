"""flashattn.sdpa: torch.nn.functional.scaled_dot_product_attention's signature on flashattn."""
import re

from . import _attention, _dropout, _errors, _options

# The library and attention() name the inputs q, k and v ("k: head_dim is 4, must equal q's
# head_dim (8)"); sdpa's messages call them what its signature does. Only the lone letters
# are names: "cuda_f16x3" or "v1" keep theirs.
_SDPA_NAMES = {"q": "query", "k": "key", "v": "value"}
_LONE_NAME = re.compile(r"\b[qkv]\b")


def sdpa_message(message):
    """message with the input names q, k, v replaced by query, key, value."""
    return _LONE_NAME.sub(lambda m: _SDPA_NAMES[m.group()], message)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
         enable_gqa=False, generator=None):
    """Drop-in for torch.nn.functional.scaled_dot_product_attention on 4-d tensors.

    query: (batch, heads_q, seqlen_q, E); key: (batch, heads_kv, seqlen_k, E); value: (batch,
    heads_kv, seqlen_k, Ev). is_causal is top-left aligned, as in PyTorch. heads_q may differ
    from heads_kv (a multiple of it) only with enable_gqa=True, as in PyTorch. value's head
    dim Ev may differ from E, as in PyTorch, on the backends that take it
    (flashattn.attention's head_dim_v); the default scale stays 1/sqrt(E). Returns (batch,
    heads_q, seqlen_q, Ev): a transposed view of flashattn's contiguous (batch, seqlen, heads,
    Ev) output.

    attn_mask, as in PyTorch: a bool tensor (True: the key takes part in attention) or a
    float tensor added to the scaled scores, on query's device, whose shape broadcasts to
    (batch, heads_q, seqlen_q, seqlen_k) (2 to 4 dimensions, aligned on the right, each of
    that size or 1). It is read in place through its strides: an expand()ed mask is never
    materialised. With is_causal as well, a key must pass both. A float mask may be
    float32, float16 or bfloat16 whatever query's dtype (PyTorch takes query's dtype or
    float32). A fully masked row (every key False, or -inf) gives 0, as PyTorch's SDPA
    gives it now, and no gradient.

    dropout_p, as in PyTorch: each attention probability is kept with probability
    1 - dropout_p and scaled by 1/(1 - dropout_p) (dropout_p in [0, 1], rounded to a
    multiple of 2**-16), and the backward drops the same ones. The seed is drawn per call
    from generator (a keyword beyond PyTorch's signature: a torch.Generator; None: torch's
    default CPU generator, so torch.manual_seed makes runs repeat; a CUDA generator makes
    the call wait for the GPU). The dropped elements differ from PyTorch's own (each
    library has its own generator), not their distribution.

    The arguments follow PyTorch's rules: is_causal and enable_gqa must be bools, dropout_p
    and scale real numbers (an int, a float, a NumPy number, a 0-d tensor; a string raises
    TypeError), scale any finite value, negative and zero included, and keyword-only. The
    deliberate differences: a NaN or infinite scale raises InvalidArgumentError, where
    PyTorch computes NaN (or zero) rows; attn_mask gets no gradient (one that requires grad
    raises UnsupportedError: detach it), and an attn_mask with scale 0 raises
    InvalidArgumentError. seqlen_q, seqlen_k and batch may be 0; a row without keys
    (seqlen_k 0) gives 0. Messages name query, key and value.
    """
    torch_op = _attention.torch_op
    if torch_op is None:
        raise ImportError("flashattn.sdpa needs torch, which is not installed")
    tensor = torch_op.torch.Tensor
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, tensor):
            raise TypeError(f"{name}: is a {_options.type_name(t)}, must be a torch tensor")
    if attn_mask is not None and not isinstance(attn_mask, tensor):
        raise TypeError(f"attn_mask: is a {_options.type_name(attn_mask)}, must be a torch "
                        f"tensor or None")
    dropout_p = _options.real_number("dropout_p", dropout_p)
    _options.require_bool("is_causal", is_causal)
    scale = _options.scale_value(scale)
    _options.require_bool("enable_gqa", enable_gqa)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise _errors.InvalidArgumentError(
                f"{name}: has shape {tuple(t.shape)}, must have 4 dimensions "
                f"(batch, heads, seqlen, head_dim)")
    if query.size(1) != key.size(1) and not enable_gqa:
        raise _errors.InvalidArgumentError(
            f"key: has {key.size(1)} heads and query {query.size(1)}; they may differ only "
            f"with enable_gqa=True (grouped-query attention)")
    try:
        dropout = _dropout.dropout_values(dropout_p, None, 0, generator)
        return torch_op.sdpa(query, key, value, causal=is_causal, scale=scale,
                             attn_mask=attn_mask, dropout=dropout)
    except _errors.Error as e:
        raise type(e)(sdpa_message(str(e))) from None
