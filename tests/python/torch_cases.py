"""Random torch inputs and the float64 reference for the PyTorch tests."""
import numpy as np
import torch

from attention_reference import reference_attention


def random_bshd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, *, dtype=torch.float32,
                device="cpu", seed=0):
    """q, k, v in flashattn's (batch, seqlen, heads, head_dim) layout."""
    generator = torch.Generator().manual_seed(seed)

    def draw(seqlen, heads):
        x = torch.randn(batch, seqlen, heads, head_dim, generator=generator)
        return x.to(device=device, dtype=dtype)
    return draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv)


def random_bhsd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, **kwargs):
    """query, key, value in SDPA's (batch, heads, seqlen, head_dim) layout, contiguous."""
    return tuple(t.transpose(1, 2).contiguous()
                 for t in random_bshd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim,
                                      **kwargs))


def as_float64(t):
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


def reference_bshd(q, k, v, **options):
    """The float64 reference (out, lse) for torch tensors in (batch, seqlen, heads, head_dim)."""
    return reference_attention(as_float64(q), as_float64(k), as_float64(v), **options)


def reference_bhsd(query, key, value, **options):
    """The float64 reference output in SDPA's layout (batch, heads, seqlen, head_dim)."""
    out, _ = reference_bshd(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                            **options)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3))


def causal_mask(seqlen_q, seqlen_k, alignment, device):
    """The boolean attn_mask (True: visible) of a causal alignment, for torch's SDPA;
    alignment None: every key visible."""
    if alignment is None:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    offset = 0 if alignment == "top_left" else seqlen_k - seqlen_q
    rows = torch.arange(seqlen_q, device=device)[:, None]
    return torch.arange(seqlen_k, device=device)[None, :] <= rows + offset


def plain_attention(q, k, v, *, causal=False, causal_alignment="top_left", scale=None):
    """Standard attention on (batch, seqlen, heads, head_dim) tensors, every step in their
    dtype and differentiable by torch: the scores materialised, grouped-query k and v
    repeated per query head. A row that sees no key gives 0 (and no gradient)."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    visible = causal_mask(q.shape[1], k.shape[1], causal_alignment if causal else None,
                          q.device)
    has_keys = visible.any(dim=1)[:, None]
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(~has_keys, 0.0)
    probs = torch.softmax(scores, dim=-1).masked_fill(~has_keys, 0.0)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


def plain_grads(q, k, v, dout, **options):
    """(dq, dk, dv) of plain_attention by torch's autograd, in the tensors' dtype."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    return torch.autograd.grad(plain_attention(q, k, v, **options), (q, k, v), dout)
