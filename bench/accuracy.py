"""Accuracy of one output (or of the gradients dq, dk, dv) against a float64 reference on a
sample of query rows (and, for dk and dv, of keys).

The reference is computed once per point, on the GPU in float64, for batch element 0, all
heads, and up to SAMPLE_ROWS query rows spread evenly over the sequence (the first and last
included, so both ends of a causal mask are covered). That costs O(rows·seqlen·head_dim),
not the O(seqlen²) of a full reference, so it fits beside the largest points.

Grouped-query attention: k and v may have fewer heads than q (a divisor of q's); query head
h reads kv head h // (heads_q / heads_kv), and dk, dv of a kv head sum over its group. v may
have a head_dim of its own (head_dim_v), which out, dout and dv then have too.

The variants (window, softcap, ALiBi, a mask tensor) come as a score_variants.Variants,
applied to the float64 scores by score_variants.scores, the same rule the baselines' masks
are made from. A row that a mask tensor leaves no key gets output 0 and no gradient, as in
flashattn and PyTorch's SDPA (probabilities).
"""
import math

import torch

import score_variants

SAMPLE_ROWS = 64


def sample_rows(seqlen, device, count=SAMPLE_ROWS):
    return torch.linspace(0, seqlen - 1, min(count, seqlen), device=device).round().long().unique()


def per_query_head(t, heads_q):
    """Batch 0 of a (batch, seqlen, heads_kv, head_dim) k or v as float64 (heads_q, seqlen,
    head_dim): each kv head repeated over the query heads of its group."""
    t0 = t[0].transpose(0, 1).double()
    return t0.repeat_interleave(heads_q // t0.shape[0], dim=0)


def probabilities(s):
    """softmax(s) over the keys, each row that sees no key (all -inf) 0 where softmax would
    give NaN."""
    empty = torch.isneginf(s).all(dim=-1, keepdim=True)
    return torch.softmax(s, dim=-1).masked_fill_(empty, 0.0)


def reference_rows(q, k, v, causal, rows, variants=score_variants.NONE):
    """float64 softmax(q·kᵀ/√d)·v for batch 0 at query `rows`: (heads_q, rows, head_dim_v).
    q is (batch, seqlen, heads_q, head_dim), k (batch, seqlen, heads_kv, head_dim), v
    (batch, seqlen, heads_kv, head_dim_v); causal is top-left (key j ≤ query i); the scores
    go through `variants`."""
    q0 = q[0, rows].transpose(0, 1).double()
    k0, v0 = (per_query_head(t, q.shape[2]) for t in (k, v))
    keys = torch.arange(k.shape[1], device=q.device)
    s, _ = score_variants.scores(torch.matmul(q0, k0.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
                                 rows, keys, causal, variants)
    return torch.matmul(probabilities(s), v0)


def rel_l2_err(out, reference, rows):
    """‖out − ref‖ / ‖ref‖ over the sampled rows; out is (batch, heads, seqlen, head_dim_v).
    None (JSON null) when the output holds NaN or inf."""
    sampled = out[0, :, rows].double()
    err = (torch.linalg.vector_norm(sampled - reference) /
           torch.linalg.vector_norm(reference)).item()
    return err if math.isfinite(err) else None


# Query rows per chunk of the gradient reference: bounds its float64 score block to about
# 1 GiB whatever the sequence length.
CHUNK_ELEMENTS = 1 << 27


def reference_gradients(q, k, v, dout, causal, rows, variants=score_variants.NONE):
    """float64 gradients of batch 0 with dout: dq at query `rows`, dk and dv at the keys of
    the same indices, dq (heads_q, rows, head_dim), dk (heads_kv, rows, head_dim) and dv
    (heads_kv, rows, head_dim_v). q is (batch, seqlen, heads_q, head_dim), dout (batch,
    seqlen, heads_q, head_dim_v), k (batch, seqlen, heads_kv, head_dim) and v (batch,
    seqlen, heads_kv, head_dim_v), seqlen_q = seqlen_k; causal is top-left; the scores go
    through `variants` (dS times the softcap's derivative).

    dk and dv of a key sum over every query row, so every row's probabilities are needed:
    the rows go through in chunks, each recomputing its scores against all keys (lse and
    D_i = Σ dout_i·out_i from them), and adds its share to the sampled keys' dk and dv,
    per query head; a kv head's are the sum over its group.
    """
    q0, do0 = (t[0].transpose(0, 1).double() for t in (q, dout))  # (h, n, d)
    k0, v0 = (per_query_head(t, q.shape[2]) for t in (k, v))
    heads, seqlen, head_dim = q0.shape
    scale = 1.0 / math.sqrt(head_dim)
    keys = torch.arange(seqlen, device=q.device)
    dq = torch.zeros(heads, len(rows), head_dim, dtype=torch.float64, device=q.device)
    dk = torch.zeros_like(dq)
    dv = torch.zeros(heads, len(rows), v.shape[-1], dtype=torch.float64, device=q.device)
    step = max(1, CHUNK_ELEMENTS // (heads * seqlen))
    for first in range(0, seqlen, step):
        chunk = torch.arange(first, min(first + step, seqlen), device=q.device)
        s, capped = score_variants.scores(torch.matmul(q0[:, chunk], k0.transpose(-2, -1)) *
                                          scale, chunk, keys, causal, variants)
        p = probabilities(s)
        row_dot = (do0[:, chunk] * torch.matmul(p, v0)).sum(-1, keepdim=True)  # D_i
        dp = torch.matmul(do0[:, chunk], v0[:, rows].transpose(-2, -1))  # sampled keys only
        ds = p[:, :, rows] * (dp - row_dot)
        if variants.softcap > 0:
            ds = ds * capped[:, :, rows]
        dk += torch.matmul(ds.transpose(-2, -1), q0[:, chunk]) * scale
        dv += torch.matmul(p[:, :, rows].transpose(-2, -1), do0[:, chunk])
        inside = (rows >= chunk[0]) & (rows <= chunk[-1])
        if inside.any():
            local = rows[inside] - first
            dp_rows = torch.matmul(do0[:, chunk[local]], v0.transpose(-2, -1))
            ds_rows = p[:, local] * (dp_rows - row_dot[:, local])
            if variants.softcap > 0:
                ds_rows = ds_rows * capped[:, local]
            dq[:, inside] = torch.matmul(ds_rows, k0) * scale
    group = heads // k.shape[2]  # query heads per kv head
    dk, dv = (g.view(-1, group, *g.shape[1:]).sum(1) for g in (dk, dv))
    return dq, dk, dv


def gradients_err(grads, reference, rows):
    """The largest relative L2 error of dq, dk and dv (the shapes of q, k and v) against
    reference_gradients at the sampled rows and keys; None where one holds NaN or inf."""
    errors = []
    for grad, ref in zip(grads, reference):
        sampled = grad[0, rows].transpose(0, 1).double()
        err = (torch.linalg.vector_norm(sampled - ref) / torch.linalg.vector_norm(ref)).item()
        if not math.isfinite(err):
            return None
        errors.append(err)
    return max(errors)
