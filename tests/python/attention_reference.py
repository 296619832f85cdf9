"""The float64 oracle for the Python tests: attention with materialised scores, in NumPy."""
import numpy as np


def alignment(seqlen_q, seqlen_k, causal, causal_alignment):
    """off: query i's diagonal is key i + off. 0 for causal top_left; seqlen_k - seqlen_q
    for bottom_right and without a causal mask (FlashAttention's convention)."""
    return 0 if causal and causal_alignment == "top_left" else seqlen_k - seqlen_q


def visible_keys(seqlen_q, seqlen_k, causal=False, causal_alignment="top_left",
                 window_size=(-1, -1)):
    """(seqlen_q, seqlen_k) bool: query i sees key j iff i + off - left <= j <= i + off +
    right, a side -1 being open, and with causal j <= i + off."""
    off = alignment(seqlen_q, seqlen_k, causal, causal_alignment)
    diagonal = np.arange(seqlen_q)[:, None] + off
    keys = np.arange(seqlen_k)[None, :]
    left, right = window_size
    visible = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if causal:
        visible &= keys <= diagonal
    if left >= 0:
        visible &= keys >= diagonal - left
    if right >= 0:
        visible &= keys <= diagonal + right
    return visible


def alibi_bias(alibi_slopes, seqlen_q, seqlen_k, off):
    """(heads_q, seqlen_q, seqlen_k): -slope_h·|i + off - j|."""
    distance = np.abs(np.arange(seqlen_q)[:, None] + off - np.arange(seqlen_k)[None, :])
    return -np.asarray(alibi_slopes, dtype=np.float64)[:, None, None] * distance


def mask_bias(attn_mask):
    """attn_mask as the float64 addend of the scores, in a shape that broadcasts to (batch,
    heads_q, seqlen_q, seqlen_k) as PyTorch broadcasts it: a bool mask is 0 where True and
    -inf where False, a float one its values."""
    attn_mask = np.asarray(attn_mask)
    if attn_mask.dtype == bool:
        return np.where(attn_mask, 0.0, -np.inf)
    return attn_mask.astype(np.float64)


def reference_attention(q, k, v, *, causal=False, causal_alignment="top_left", scale=None,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, attn_mask=None):
    """out (batch, seqlen_q, heads_q, head_dim_v) and lse (batch, heads_q, seqlen_q), float64,
    for q, k (..., head_dim) and v (..., head_dim_v); the default scale is 1/sqrt(head_dim).

    Query head h reads kv head h // (heads_q // heads_kv). The mask comes first: a key a row
    does not see is never read, whatever its k and v hold. A row that sees no key (every row
    when seqlen_k is 0) gets out 0 and lse -inf; every other row is standard attention's,
    non-finite values included (NaN in a score it sees, or a largest score of ±Inf, makes
    the row NaN; NaN or Inf in a v row it sees reaches that column). The variants as
    flashattn.attention defines them: window_size masks (visible_keys), softcap c > 0 turns
    each scaled score s into c·tanh(s/c), then ALiBi adds -slope_h·|i + off - j|, then
    attn_mask adds its bias (mask_bias). With attn_mask, a row whose every score is -inf
    sees no key: out 0, lse -inf.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1:3]
    k = np.repeat(k, heads_q // heads_kv, axis=2)
    v = np.repeat(v, heads_q // heads_kv, axis=2)
    if scale is None:
        scale = 1.0 / np.sqrt(head_dim)
    visible = visible_keys(seqlen_q, seqlen_k, causal, causal_alignment, window_size)
    with np.errstate(invalid="ignore", over="ignore"):
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        if alibi_slopes is not None:
            off = alignment(seqlen_q, seqlen_k, causal, causal_alignment)
            scores = scores + alibi_bias(alibi_slopes, seqlen_q, seqlen_k, off)
        if attn_mask is not None:
            scores = scores + mask_bias(attn_mask)
        scores = np.where(visible, scores, -np.inf)
        # (seqlen_q, 1), or with a mask (batch, heads_q, seqlen_q, 1).
        has_keys = (visible.any(axis=-1) if attn_mask is None
                    else ~np.isneginf(scores).all(axis=-1))[..., None]
        # Rows without keys get max 0 so their (all -inf) scores give weights 0, not NaN.
        row_max = np.where(has_keys, scores.max(axis=-1, keepdims=True, initial=-np.inf), 0.0)
        weights = np.exp(scores - row_max)
        row_sum = weights.sum(axis=-1, keepdims=True)
        probs = weights / np.where(has_keys, row_sum, 1.0)
        if np.isfinite(v).all():
            out = np.einsum("bhqk,bkhd->bqhd", probs, v)
        else:  # 0 · Inf is NaN: keys a row does not see must not reach it at all
            terms = probs[..., None] * v.transpose(0, 2, 1, 3)[:, :, None]  # (b, h, q, k, d)
            out = np.where(visible[..., None], terms, 0.0).sum(axis=3).transpose(0, 2, 1, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(has_keys, row_max + np.log(row_sum), -np.inf)[..., 0]
    return out, lse


def rel_l2(actual, expected):
    """||actual - expected|| / ||expected||, in float64 (0 when both are 0)."""
    actual, expected = (np.asarray(x, dtype=np.float64) for x in (actual, expected))
    norm = np.linalg.norm(expected)
    diff = np.linalg.norm(actual - expected)
    return diff / norm if norm > 0 else diff


def assert_lse_close(lse, expected, tol):
    """Equal -inf where the reference's row sees no key; elsewhere within tol (absolute:
    lse is a log, so its error is the relative error of the softmax denominator)."""
    lse = np.asarray(lse, dtype=np.float64)
    empty = np.isneginf(expected)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    np.testing.assert_allclose(lse[~empty], expected[~empty], rtol=0, atol=tol)


def plain_attention_backward(q, k, v, dout, *, causal=False, causal_alignment="top_left",
                             scale=None, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             attn_mask=None, dtype=np.float64):
    """(out, dq, dk, dv) of standard attention with every step done in NumPy's `dtype`:
    float64 is the oracle for the backward, a 16-bit dtype the same computation at that
    precision (the error a plain implementation in that dtype makes).

    With P = softmax(S) (masked), S = scale·q·kᵀ through the variants (reference_attention):
    dv = Pᵀ·dout, dP = dout·vᵀ, dS = P∘(dP − D) with D_i = Σ_c dout_ic·out_ic, times the
    softcap's derivative 1 − tanh², dq = scale·dS·k, dk = scale·dSᵀ·q (ALiBi's bias has
    none, nor attn_mask's). A row that sees no key (attn_mask's fully masked rows too) has
    P 0, so dq 0; grouped-query dk and dv sum over the query heads of a kv head's group.
    Finite inputs only (attn_mask's -inf apart). v, out, dout and dv may have a head_dim of
    their own (head_dim_v); the default scale is 1/sqrt(q's head_dim).
    """
    q, k, v, dout = (np.asarray(x, dtype=dtype) for x in (q, k, v, dout))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1:3]
    group = heads_q // heads_kv
    k, v = (np.repeat(x, group, axis=2) for x in (k, v))
    scale = dtype(1.0 / np.sqrt(head_dim) if scale is None else scale)
    visible = visible_keys(seqlen_q, seqlen_k, causal, causal_alignment, window_size)
    # (batch, heads, seqlen, head_dim) for the products.
    qh, kh, vh, douth = (x.transpose(0, 2, 1, 3) for x in (q, k, v, dout))
    scores = ((qh @ kh.transpose(0, 1, 3, 2)) * scale).astype(dtype)
    capped = dtype(1)  # ∂(softcapped score)/∂(scaled score)
    if softcap > 0:
        cap = dtype(softcap)
        tanh = np.tanh(scores / cap).astype(dtype)
        scores, capped = (cap * tanh).astype(dtype), (1 - tanh * tanh).astype(dtype)
    if alibi_slopes is not None:
        off = alignment(seqlen_q, seqlen_k, causal, causal_alignment)
        scores = (scores + alibi_bias(alibi_slopes, seqlen_q, seqlen_k, off)).astype(dtype)
    if attn_mask is not None:
        scores = (scores + mask_bias(attn_mask)).astype(dtype)
    scores = np.where(visible, scores, -np.inf).astype(dtype)
    row_max = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
    row_max = np.where(np.isneginf(row_max), 0, row_max).astype(dtype)
    weights = np.exp(scores - row_max)
    row_sum = weights.sum(axis=-1, keepdims=True)
    probs = (weights / np.where(row_sum > 0, row_sum, 1)).astype(dtype)
    out = probs @ vh
    dv = probs.transpose(0, 1, 3, 2) @ douth
    dprobs = douth @ vh.transpose(0, 1, 3, 2)
    row_dot = (douth * out).sum(axis=-1, keepdims=True)
    dscores = (probs * (dprobs - row_dot) * capped).astype(dtype)
    dq = (dscores @ kh) * scale
    dk = (dscores.transpose(0, 1, 3, 2) @ qh) * scale

    def kv_heads(x):  # (batch, seqlen_k, heads_kv, x's head_dim), summed over each group
        x = x.transpose(0, 2, 1, 3)
        return x.reshape(batch, seqlen_k, heads_kv, group, x.shape[-1]).sum(axis=3, dtype=dtype)
    return out.transpose(0, 2, 1, 3), dq.transpose(0, 2, 1, 3), kv_heads(dk), kv_heads(dv)
