"""Accuracy of one output against a float64 reference on a sample of query rows.

The reference is computed once per point, on the GPU in float64, for batch element 0, all
heads, and up to SAMPLE_ROWS query rows spread evenly over the sequence (the first and last
included, so both ends of a causal mask are covered). That costs O(rows·seqlen·head_dim),
not the O(seqlen²) of a full reference, so it fits beside the largest points.
"""
import math

import torch

SAMPLE_ROWS = 64


def sample_rows(seqlen, device, count=SAMPLE_ROWS):
    return torch.linspace(0, seqlen - 1, min(count, seqlen), device=device).round().long().unique()


def reference_rows(q, k, v, causal, rows):
    """float64 softmax(q·kᵀ/√d)·v for batch 0 at query `rows`: (heads, rows, head_dim).
    q, k, v are (batch, seqlen, heads, head_dim); causal is top-left (key j ≤ query i)."""
    q0 = q[0, rows].transpose(0, 1).double()
    k0, v0 = (t[0].transpose(0, 1).double() for t in (k, v))
    s = torch.matmul(q0, k0.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        keys = torch.arange(k.shape[1], device=q.device)
        s.masked_fill_(keys[None, :] > rows[:, None], float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v0)


def rel_l2_err(out, reference, rows):
    """‖out − ref‖ / ‖ref‖ over the sampled rows; out is (batch, heads, seqlen, head_dim).
    None (JSON null) when the output holds NaN or inf."""
    sampled = out[0, :, rows].double()
    err = (torch.linalg.vector_norm(sampled - reference) /
           torch.linalg.vector_norm(reference)).item()
    return err if math.isfinite(err) else None
