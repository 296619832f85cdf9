"""flashattn.sdpa: torch.nn.functional.scaled_dot_product_attention's signature on flashattn."""
from . import _attention, _errors, _options


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """Drop-in for torch.nn.functional.scaled_dot_product_attention on 4-d tensors.

    query: (batch, heads_q, seqlen_q, head_dim); key, value: (batch, heads_kv, seqlen_k,
    head_dim). is_causal is top-left aligned, as in PyTorch. heads_q may differ from heads_kv
    (a multiple of it) only with enable_gqa=True, as in PyTorch. attn_mask and dropout are
    not supported. Returns (batch, heads_q, seqlen_q, head_dim): a transposed view of
    flashattn's contiguous (batch, seqlen, heads, head_dim) output.
    """
    torch_op = _attention.torch_op
    if torch_op is None:
        raise ImportError("flashattn.sdpa needs torch, which is not installed")
    if attn_mask is not None:
        raise _errors.UnsupportedError(
            "attn_mask: flashattn.sdpa supports no explicit mask, only is_causal; pass "
            "attn_mask=None")
    if dropout_p != 0.0:
        raise _errors.UnsupportedError(
            f"dropout_p: is {dropout_p}; flashattn has no dropout, so it must be 0.0")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch_op.torch.Tensor):
            raise TypeError(f"{name}: is a {type(t).__module__}.{type(t).__qualname__}, must "
                            f"be a torch tensor")
        if t.dim() != 4:
            raise _errors.InvalidArgumentError(
                f"{name}: has shape {tuple(t.shape)}, must have 4 dimensions "
                f"(batch, heads, seqlen, head_dim)")
    if query.size(1) != key.size(1) and not enable_gqa:
        raise _errors.InvalidArgumentError(
            f"key: has {key.size(1)} heads and query {query.size(1)}; they may differ only "
            f"with enable_gqa=True (grouped-query attention)")
    return torch_op.sdpa(query, key, value, causal=is_causal,
                         scale=_options.scale_value(scale))
