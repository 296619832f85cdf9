"""Variable-length (packed) batches for the tests of flashattn.varlen_attention: the cases,
random packed inputs, and per_sequence, which turns a dense computation into the packed
batch's expected result, sequence by sequence. Shared by the NumPy, CPU and CUDA tests."""
import numpy as np

# (seqlen_q, seqlen_k) of each sequence: lengths 0 and 1, sequences without queries or
# without keys, seqlen_q above, equal to and below seqlen_k (each alignment matters).
LENGTHS = [(5, 7), (0, 3), (1, 1), (9, 4), (3, 0), (12, 12), (1, 6), (0, 0), (7, 15)]

# (id, lengths, options): flashattn.attention's options, with "alibi": True standing for
# variant_cases.alibi_slopes(heads_q), in the caller's array type.
CASES = [
    ("plain", LENGTHS, {}),
    ("causal_top_left", LENGTHS, dict(causal=True)),
    ("causal_bottom_right", LENGTHS, dict(causal=True, causal_alignment="bottom_right")),
    ("window", LENGTHS, dict(window_size=(2, 1))),
    ("window_causal", LENGTHS, dict(causal=True, window_size=(3, 0), scale=0.5)),
    ("softcap_alibi", LENGTHS,
     dict(causal=True, causal_alignment="bottom_right", softcap=3.0, alibi=True)),
    ("one_sequence", [(17, 23)], dict(causal=True)),
]
CASE_IDS = [case[0] for case in CASES]

# Longer sequences for the GPU kernels: several query and key blocks per sequence, ragged
# ends, and short sequences between long ones.
LONG_LENGTHS = [(1, 1), (130, 70), (0, 17), (257, 513), (64, 0), (700, 699), (3, 300)]
LONG_CASES = [
    ("long_plain", LONG_LENGTHS, {}),
    ("long_causal_top_left", LONG_LENGTHS, dict(causal=True)),
    ("long_causal_bottom_right", LONG_LENGTHS,
     dict(causal=True, causal_alignment="bottom_right")),
    ("long_window", LONG_LENGTHS, dict(causal=True, window_size=(100, 0))),
    ("long_softcap_alibi", LONG_LENGTHS, dict(softcap=20.0, scale=0.3, alibi=True)),
]
LONG_CASE_IDS = [case[0] for case in LONG_CASES]


def prefix_sums(lengths):
    """cu_seqlens_q, cu_seqlens_k: int32 NumPy prefix sums of the (seqlen_q, seqlen_k) pairs."""
    lengths = np.asarray(lengths, dtype=np.int32).reshape(-1, 2)
    zero = np.zeros((1, 2), np.int32)
    cu = np.concatenate([zero, np.cumsum(lengths, axis=0, dtype=np.int32)])
    return cu[:, 0].copy(), cu[:, 1].copy()


def packed_problem(lengths, heads=(4, 2), head_dim=16, dtype=np.float32, seed=0,
                   head_dim_v=None):
    """q, k, v, dout: NumPy (total, heads, head_dim) arrays of the lengths' totals (heads_q
    heads for q and dout, heads_kv for k and v; v and dout of head_dim_v where given), and
    the prefix sums."""
    cu_seqlens_q, cu_seqlens_k = prefix_sums(lengths)
    rng = np.random.default_rng(seed)
    head_dim_v = head_dim_v or head_dim

    def draw(total, heads_, dim=head_dim):
        return rng.standard_normal((total, heads_, dim)).astype(dtype)
    total_q, total_k = int(cu_seqlens_q[-1]), int(cu_seqlens_k[-1])
    return (draw(total_q, heads[0]), draw(total_k, heads[1]),
            draw(total_k, heads[1], head_dim_v), draw(total_q, heads[0], head_dim_v),
            cu_seqlens_q, cu_seqlens_k)


def per_sequence(dense, cu_seqlens_q, cu_seqlens_k, concatenate=np.concatenate):
    """dense, a function of (batch, seqlen, heads, head_dim) inputs q, k, v (then inputs of
    q's shape, such as dout) and keywords returning a tuple of results, as the same function
    of packed (total, heads, head_dim) inputs: dense runs on each sequence alone (batch 1),
    and its results are packed again, along the seqlen axis of a 4-d result ((1, seqlen,
    heads, head_dim): out, dq along q's rows, dk, dv along k's) and the last axis of an lse
    ((1, heads_q, seqlen_q)). concatenate: np.concatenate, or torch.cat for tensors."""
    starts_q, starts_k = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]

    def packed(q, k, v, *row_inputs, **options):
        results = []
        for b in range(len(starts_q) - 1):
            rows, keys = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])
            results.append(dense(q[None, rows], k[None, keys], v[None, keys],
                                 *(x[None, rows] for x in row_inputs), **options))
        return tuple(concatenate([result[i][0] for result in results],
                                 0 if results[0][i].ndim == 4 else -1)
                     for i in range(len(results[0])))
    return packed
