"""The float64 oracle for the Python tests: attention with materialised scores, in NumPy."""
import numpy as np


def reference_attention(q, k, v, *, causal=False, causal_alignment="top_left", scale=None):
    """out (batch, seqlen_q, heads_q, head_dim) and lse (batch, heads_q, seqlen_q), float64.

    Query head h reads kv head h // (heads_q // heads_kv). A row that sees no key gets out 0
    and lse -inf.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    seqlen_q, heads_q, head_dim = q.shape[1:]
    seqlen_k, heads_kv = k.shape[1:3]
    k = np.repeat(k, heads_q // heads_kv, axis=2)
    v = np.repeat(v, heads_q // heads_kv, axis=2)
    if scale is None:
        scale = 1.0 / np.sqrt(head_dim)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        offset = 0 if causal_alignment == "top_left" else seqlen_k - seqlen_q
        visible = np.arange(seqlen_k)[None, :] <= np.arange(seqlen_q)[:, None] + offset
        scores = np.where(visible, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = np.exp(scores - row_max)
    row_sum = weights.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", weights / np.where(row_sum > 0, row_sum, 1.0), v)
    with np.errstate(divide="ignore"):
        lse = (row_max + np.log(row_sum))[..., 0]
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
