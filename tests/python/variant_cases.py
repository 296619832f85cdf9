"""The attention variants' test cases (sliding window, softcap, ALiBi, bias and mask tensors,
and their mixes with each other and the causal masks), shared by the CPU and CUDA tests of
the variants."""
from typing import NamedTuple

import numpy as np


def alibi_slopes(heads):
    """ALiBi's slopes for `heads` query heads, 2^(-8(h+1)/heads) (the ALiBi paper's, as the
    project's harness draws them), float32."""
    return np.exp2(-8.0 * np.arange(1, heads + 1) / heads).astype(np.float32)


# (id, (seqlen_q, seqlen_k), options): the options are flashattn.attention's, with "alibi":
# True standing for alibi_slopes(heads_q), made in the caller's array type. Lengths differ
# where an alignment matters: without causal the window is bottom-right aligned.
CASES = [
    ("window_causal", (40, 40), dict(causal=True, window_size=(5, 0))),
    ("window_both_sides", (23, 37), dict(window_size=(3, 2))),
    ("window_left_open", (33, 33), dict(window_size=(-1, 3))),
    ("window_one_ahead", (16, 16), dict(window_size=(0, 1))),
    ("window_causal_wins_right", (30, 20), dict(causal=True, window_size=(4, 6))),
    ("window_bottom_right_causal", (20, 45),
     dict(causal=True, causal_alignment="bottom_right", window_size=(7, -1))),
    ("window_rows_without_keys", (30, 10), dict(window_size=(1, 1))),
    ("softcap", (19, 41), dict(softcap=5.0, scale=1.0)),
    ("softcap_causal", (41, 19), dict(causal=True, softcap=2.0)),
    ("alibi", (19, 41), dict(alibi=True)),
    ("alibi_top_left", (41, 19), dict(causal=True, alibi=True)),
    ("alibi_bottom_right", (25, 35),
     dict(causal=True, causal_alignment="bottom_right", alibi=True)),
    ("softcap_alibi", (27, 27), dict(softcap=3.0, scale=0.5, alibi=True)),
    ("window_softcap_alibi", (31, 44), dict(window_size=(6, 2), softcap=3.0, alibi=True)),
    ("all_causal", (44, 44), dict(causal=True, window_size=(8, 0), softcap=4.0, scale=0.7,
                                  alibi=True)),
]
CASE_IDS = [case[0] for case in CASES]


def options_with_slopes(options, heads_q, as_array=np.asarray):
    """options with "alibi" replaced by alibi_slopes, made by as_array from the float32
    slopes (np.asarray for NumPy inputs, a torch conversion for tensors)."""
    options = dict(options)
    if options.pop("alibi", False):
        options["alibi_slopes"] = as_array(alibi_slopes(heads_q))
    return options


def without_variants(options):
    """The plain attention of the same problem: the options less every variant."""
    return {name: value for name, value in options.items()
            if name not in ("window_size", "softcap", "alibi_slopes", "attn_mask")}

# Longer sequences for the GPU kernels: windows whose ends fall inside key blocks, several
# blocks wholly outside, and sequences of unequal lengths.
LONG_CASES = [
    ("long_window_causal", (520, 520), dict(causal=True, window_size=(130, 0))),
    ("long_window_both_sides", (333, 611), dict(window_size=(77, 45))),
    ("long_window_bottom_right", (300, 700),
     dict(causal=True, causal_alignment="bottom_right", window_size=(200, -1))),
    ("long_softcap", (257, 513), dict(softcap=10.0, scale=0.5)),
    ("long_alibi_causal", (400, 400), dict(causal=True, alibi=True)),
    ("long_all", (450, 450), dict(causal=True, window_size=(100, 0), softcap=20.0, scale=0.3,
                                   alibi=True)),
]
LONG_CASE_IDS = [case[0] for case in LONG_CASES]


class MaskSpec(NamedTuple):
    """An attn_mask to draw: kind "bool" (True: attend, 3 in 4) or a float dtype name (a bias,
    2·N(0, 1) with about 1 in 7 entries -inf); dims, one letter per dimension, "b", "h",
    "q", "k" for the batch, query heads, seqlen_q and seqlen_k, "1" for a broadcast one
    (PyTorch's rule: 2 to 4, aligned on the right); rows_without_keys: query rows 1 and
    seqlen_q - 2 masked at every key (dims must hold "q")."""

    kind: str
    dims: str
    rows_without_keys: bool = False


def mask_array(spec, batch, heads_q, seqlen_q, seqlen_k, seed):
    """The NumPy array (bool, float32 or float16) of a MaskSpec for these sizes."""
    sizes = {"b": batch, "h": heads_q, "q": seqlen_q, "k": seqlen_k, "1": 1}
    shape = tuple(sizes[d] for d in spec.dims)
    rng = np.random.default_rng(seed)
    if spec.kind == "bool":
        mask, masked = rng.random(shape) < 0.75, False
    else:
        mask = np.where(rng.random(shape) < 0.15, -np.inf, 2 * rng.standard_normal(shape))
        mask, masked = mask.astype(spec.kind), -np.inf
    if spec.rows_without_keys:
        rows = (slice(None),) * spec.dims.index("q")
        for row in (1, seqlen_q - 2):
            mask[rows + (row,)] = masked
    return mask


def options_with_mask(options, batch, heads_q, seqlen_q, seqlen_k, as_array=np.asarray):
    """options with a MaskSpec attn_mask replaced by its array, made by as_array from the
    NumPy one (np.asarray for NumPy inputs, a torch conversion for tensors)."""
    spec = options.get("attn_mask")
    if spec is None:
        return options
    array = mask_array(spec, batch, heads_q, seqlen_q, seqlen_k, seed=seqlen_q * seqlen_k)
    return dict(options, attn_mask=as_array(array))


# The NumPy problems of the variants' CPU tests: batch 2, grouped-query (4 query heads on
# 2 kv heads), head_dim 32.
BATCH, HEADS_Q, HEADS_KV, HEAD_DIM = 2, 4, 2, 32


def problem(seqlen_q, seqlen_k, dtype=np.float32, seed=0):
    """q, k, v and dout, (batch, seqlen, heads, head_dim), grouped-query (4 heads on 2)."""
    rng = np.random.default_rng(seed)

    def draw(seqlen, heads):
        return rng.standard_normal((BATCH, seqlen, heads, HEAD_DIM)).astype(dtype)
    return draw(seqlen_q, HEADS_Q), draw(seqlen_k, HEADS_KV), draw(seqlen_k, HEADS_KV), \
        draw(seqlen_q, HEADS_Q)


def numpy_case(case, dtype=np.float32):
    """q, k, v, dout and the options of one of CASES or MASK_CASES (and their long lists),
    its slopes and mask as NumPy arrays."""
    _, (seqlen_q, seqlen_k), options = case
    q, k, v, dout = problem(seqlen_q, seqlen_k, dtype, seed=seqlen_q + seqlen_k)
    options = options_with_slopes(options, HEADS_Q)
    return q, k, v, dout, options_with_mask(options, BATCH, HEADS_Q, seqlen_q, seqlen_k)


# (id, (seqlen_q, seqlen_k), options): as CASES', attn_mask a MaskSpec, alone and with the
# other variants; shapes of each broadcast, rows the mask leaves without keys, negative
# scales (the mask's -inf stays -inf).
MASK_CASES = [
    ("mask_full", (23, 37), dict(attn_mask=MaskSpec("bool", "bhqk"))),
    ("mask_shared", (19, 41), dict(attn_mask=MaskSpec("bool", "qk"))),
    ("mask_per_head", (33, 20), dict(attn_mask=MaskSpec("bool", "hqk"))),
    ("mask_key_padding", (20, 33), dict(attn_mask=MaskSpec("bool", "b11k"))),
    ("mask_whole_rows", (17, 29), dict(attn_mask=MaskSpec("bool", "bhq1"))),
    ("mask_rows_without_keys", (30, 20), dict(attn_mask=MaskSpec("bool", "bhqk", True))),
    ("bias_full", (23, 37), dict(attn_mask=MaskSpec("float32", "bhqk"))),
    ("bias_per_batch", (31, 17), dict(attn_mask=MaskSpec("float32", "b1qk"))),
    ("bias_float16_shared", (27, 27), dict(attn_mask=MaskSpec("float16", "qk"))),
    ("bias_rows_without_keys", (30, 20), dict(attn_mask=MaskSpec("float32", "1hqk", True))),
    ("mask_causal", (40, 40), dict(causal=True, attn_mask=MaskSpec("bool", "qk"))),
    ("bias_window_bottom_right", (20, 45),
     dict(causal=True, causal_alignment="bottom_right", window_size=(7, -1),
          attn_mask=MaskSpec("float32", "bhqk"))),
    ("bias_softcap_alibi", (27, 27),
     dict(softcap=3.0, scale=0.5, alibi=True, attn_mask=MaskSpec("float32", "bhqk"))),
    ("mask_negative_scale", (16, 24), dict(scale=-0.6, attn_mask=MaskSpec("bool", "bhqk"))),
    ("bias_negative_scale", (16, 24),
     dict(scale=-0.6, attn_mask=MaskSpec("float16", "hqk"))),
]
MASK_CASE_IDS = [case[0] for case in MASK_CASES]

# Longer sequences for the GPU kernels: masks across many key blocks, rows without keys in
# the middle of a tile, and the mask with every other variant.
LONG_MASK_CASES = [
    ("long_mask_causal", (520, 520), dict(causal=True, attn_mask=MaskSpec("bool", "qk"))),
    ("long_bias_per_batch", (333, 611), dict(attn_mask=MaskSpec("float32", "b1qk"))),
    ("long_key_padding_bottom_right", (300, 700),
     dict(causal=True, causal_alignment="bottom_right", attn_mask=MaskSpec("bool", "b11k"))),
    ("long_bias_rows_without_keys", (257, 513),
     dict(attn_mask=MaskSpec("float16", "bhqk", True))),
    ("long_mask_all", (450, 450),
     dict(causal=True, window_size=(100, 0), softcap=20.0, scale=0.3, alibi=True,
          attn_mask=MaskSpec("bool", "hqk", True))),
]
LONG_MASK_CASE_IDS = [case[0] for case in LONG_MASK_CASES]
