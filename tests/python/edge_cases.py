"""Inputs at the edges, shared by the NumPy and PyTorch tests: problems without elements, and
non-finite values with where standard attention puts NaN for each."""
import numpy as np

# (batch, seqlen_q, seqlen_k): each way a problem can be empty.
EMPTY_SIZES = [(0, 5, 6), (2, 0, 6), (2, 5, 0), (2, 0, 0), (0, 0, 0)]
EMPTY_IDS = [f"b{b}_sq{sq}_sk{sk}" for b, sq, sk in EMPTY_SIZES]


def qkv(batch, seqlen_q, seqlen_k, heads_q=4, heads_kv=2, head_dim=8, seed=0):
    """float32 (batch, seqlen, heads, head_dim) arrays; heads_q / heads_kv = 2 (GQA)."""
    rng = np.random.default_rng(seed)

    def draw(seqlen, heads):
        return rng.standard_normal((batch, seqlen, heads, head_dim)).astype(np.float32)
    return draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv)


def _nan_q_row():
    q, k, v = qkv(2, 9, 7)
    q[1, 3, 2, 5] = np.nan  # one element of one query row: every score of that row is NaN
    nan = np.zeros(q.shape, bool)
    nan[1, 3, 2, :] = True
    return (q, k, v), {}, nan


def _nan_k():
    q, k, v = qkv(1, 9, 9)
    k[0, 4, 1, 0] = np.nan  # key 4 of kv head 1 (query heads 2, 3): NaN where it is seen
    nan = np.zeros(q.shape, bool)
    nan[0, 4:, 2:, :] = True  # causal: rows 4.. see key 4
    return (q, k, v), {"causal": True}, nan


def _inf_k():
    q, k, v = qkv(1, 12, 12)
    k[0, 2, 0, 3] = np.inf  # score ±Inf by the sign of q[..., 3]
    # A row that sees the key with score +Inf (q[..., 3] > 0) is NaN (Inf - Inf in the
    # softmax); with -Inf the key gets weight 0 and the row is finite.
    nan = np.zeros(q.shape, bool)
    nan[0, 2:, :2, :] = (q[0, 2:, :2, 3] > 0)[..., None]
    return (q, k, v), {"causal": True}, nan


def _nan_v():
    q, k, v = qkv(1, 8, 8)
    v[0, 5, 0, 6] = np.nan  # every row that sees key 5 of kv head 0 gets NaN in column 6
    nan = np.zeros(q.shape, bool)
    nan[0, 5:, :2, 6] = True
    return (q, k, v), {"causal": True}, nan


def _neg_inf_v_unmasked():
    q, k, v = qkv(1, 5, 6)
    v[0, 1, 1, 0] = -np.inf  # no mask: every row of query heads 2, 3 sees it
    nan = np.zeros(q.shape, bool)
    return (q, k, v), {}, nan  # -Inf, not NaN: checked against the references


def _bottom_right_rows_without_keys():
    q, k, v = qkv(1, 10, 4)
    k[0, 0, :, 1] = np.nan  # key 0 is NaN, but rows 0..5 see no key: 0 and lse -inf
    nan = np.zeros(q.shape, bool)
    nan[0, 6:] = True  # rows 6..9 see key 0
    return (q, k, v), {"causal": True, "causal_alignment": "bottom_right"}, nan


NON_FINITE = {"nan_q_row": _nan_q_row, "nan_k": _nan_k, "inf_k": _inf_k, "nan_v": _nan_v,
              "neg_inf_v": _neg_inf_v_unmasked,
              "bottom_right_empty_rows": _bottom_right_rows_without_keys}


def assert_matches(out, lse, expected_out, expected_lse):
    """Equal NaN and ±Inf positions; finite values within fp32 accuracy."""
    out, lse = np.asarray(out, np.float64), np.asarray(lse, np.float64)
    np.testing.assert_allclose(out, expected_out, rtol=1e-4, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=1e-4, equal_nan=True)
