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
    """The boolean attn_mask (True: visible) of a causal alignment, for torch's SDPA."""
    offset = 0 if alignment == "top_left" else seqlen_k - seqlen_q
    rows = torch.arange(seqlen_q, device=device)[:, None]
    return torch.arange(seqlen_k, device=device)[None, :] <= rows + offset
