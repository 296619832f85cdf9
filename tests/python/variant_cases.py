"""The attention variants' test cases (sliding window, softcap, ALiBi, and their mixes with
each other and the causal masks), shared by the CPU and CUDA tests of the variants."""
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
            if name not in ("window_size", "softcap", "alibi_slopes")}

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
