"""flashattn.sdpa takes PyTorch's rule for each argument it shares with
torch.nn.functional.scaled_dot_product_attention. Every case makes the same call on both and
expects the same outcome: both succeed with the same result, or both raise the same exception
class. The deliberate differences (a NaN or infinite scale; a float attn_mask of another
dtype than query's; a mask that requires grad) are tested as such."""
import contextlib
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _sdpa  # noqa: E402
from attention_reference import rel_l2  # noqa: E402
from torch_cases import random_bhsd  # noqa: E402


def inputs():
    """query, key, value: (batch, heads, seqlen, head_dim) float32 CPU tensors."""
    return random_bhsd(2, 5, 7, 4, 4, 8, seed=11)


def outcome(sdpa, call):
    """(result, None) or (None, exception) of call(sdpa, query, key, value)."""
    try:
        return call(sdpa, *inputs()), None
    except Exception as e:  # noqa: BLE001: the class is what is compared
        return None, e


def drawn_masks():
    """attn_mask values for inputs()' sizes (batch 2, heads 4, seqlen_q 5, seqlen_k 7): bool
    masks that leave every row a key, and float biases (some -inf)."""
    generator = torch.Generator().manual_seed(12)
    keep = torch.rand(2, 4, 5, 7, generator=generator) < 0.7
    keep[..., 0] = True
    bias = torch.randn(2, 4, 5, 7, generator=generator).masked_fill(~keep, -float("inf"))
    return keep, bias


KEEP, BIAS = drawn_masks()

# Calls PyTorch accepts: flashattn gives the same output (fp32: within 1e-5 relative L2).
ACCEPTED = {
    "scale_negative": lambda f, q, k, v: f(q, k, v, scale=-0.7),
    "scale_zero": lambda f, q, k, v: f(q, k, v, scale=0.0),
    "scale_negative_zero": lambda f, q, k, v: f(q, k, v, scale=-0.0),
    "scale_int": lambda f, q, k, v: f(q, k, v, scale=2),
    "scale_int_zero": lambda f, q, k, v: f(q, k, v, scale=0),
    "scale_bool": lambda f, q, k, v: f(q, k, v, scale=True),
    "scale_large": lambda f, q, k, v: f(q, k, v, scale=40.0),
    "scale_tiny": lambda f, q, k, v: f(q, k, v, scale=1e-30),
    "scale_none": lambda f, q, k, v: f(q, k, v, scale=None),
    "scale_numpy_float32": lambda f, q, k, v: f(q, k, v, scale=np.float32(0.25)),
    "scale_numpy_int64": lambda f, q, k, v: f(q, k, v, scale=np.int64(-1)),
    "scale_tensor_0d": lambda f, q, k, v: f(q, k, v, scale=torch.tensor(0.5)),
    "scale_tensor_0d_int": lambda f, q, k, v: f(q, k, v, scale=torch.tensor(-3)),
    "scale_negative_causal": lambda f, q, k, v: f(q, k, v, is_causal=True, scale=-1.5),
    "scale_zero_causal": lambda f, q, k, v: f(q, k, v, is_causal=True, scale=0),
    "is_causal_true": lambda f, q, k, v: f(q, k, v, is_causal=True),
    "is_causal_false": lambda f, q, k, v: f(q, k, v, is_causal=False),
    "is_causal_positional": lambda f, q, k, v: f(q, k, v, None, 0.0, True),
    "dropout_p_int_zero": lambda f, q, k, v: f(q, k, v, dropout_p=0),
    "dropout_p_false": lambda f, q, k, v: f(q, k, v, dropout_p=False),
    "dropout_p_tensor_zero": lambda f, q, k, v: f(q, k, v, dropout_p=torch.tensor(0.0)),
    "enable_gqa_true": lambda f, q, k, v: f(q, k[:, :2], v[:, :2], enable_gqa=True),
    "attn_mask_none": lambda f, q, k, v: f(q, k, v, attn_mask=None),
    "attn_mask_bool_2d": lambda f, q, k, v: f(q, k, v, attn_mask=KEEP[0, 0]),
    "attn_mask_bool_3d": lambda f, q, k, v: f(q, k, v, attn_mask=KEEP[0]),
    "attn_mask_bool_4d": lambda f, q, k, v: f(q, k, v, attn_mask=KEEP),
    "attn_mask_bool_positional": lambda f, q, k, v: f(q, k, v, KEEP[:, :1]),
    "attn_mask_bool_key_padding": lambda f, q, k, v: f(q, k, v, attn_mask=KEEP[:, :1, :1]),
    "attn_mask_bool_expanded": lambda f, q, k, v: f(q, k, v,
                                                    attn_mask=KEEP[0, 0].expand(2, 4, 5, 7)),
    "attn_mask_bool_is_causal": lambda f, q, k, v: f(q, k, v, attn_mask=KEEP, is_causal=True),
    "attn_mask_float_2d": lambda f, q, k, v: f(q, k, v, attn_mask=BIAS[1, 2]),
    "attn_mask_float_4d": lambda f, q, k, v: f(q, k, v, attn_mask=BIAS),
    "attn_mask_float_strided": lambda f, q, k, v: f(q, k, v, attn_mask=BIAS.transpose(0, 1)[:, 0]),
    "attn_mask_float_scale": lambda f, q, k, v: f(q, k, v, attn_mask=BIAS, scale=-0.3),
    "attn_mask_float_gqa": lambda f, q, k, v: f(q, k[:, :2], v[:, :2], attn_mask=BIAS,
                                                enable_gqa=True),
}

# Calls PyTorch refuses: flashattn raises the same class, and both messages contain the word.
REFUSED = {
    "scale_str": (lambda f, q, k, v: f(q, k, v, scale="0.5"), "scale"),
    "scale_fraction": (lambda f, q, k, v: f(q, k, v, scale=Fraction(1, 2)), "scale"),
    "scale_decimal": (lambda f, q, k, v: f(q, k, v, scale=Decimal("0.5")), "scale"),
    "scale_list": (lambda f, q, k, v: f(q, k, v, scale=[0.5]), "scale"),
    "scale_numpy_0d_array": (lambda f, q, k, v: f(q, k, v, scale=np.array(0.5)), "scale"),
    "scale_tensor_1_element": (lambda f, q, k, v: f(q, k, v, scale=torch.tensor([0.5])),
                               "scale"),
    "scale_tensor_requires_grad": (
        lambda f, q, k, v: f(q, k, v, scale=torch.tensor(0.5, requires_grad=True)), "scale"),
    "scale_int_beyond_float": (lambda f, q, k, v: f(q, k, v, scale=10**400), "too large"),
    "scale_positional": (lambda f, q, k, v: f(q, k, v, None, 0.0, False, 0.5), "positional"),
    "is_causal_str": (lambda f, q, k, v: f(q, k, v, is_causal="yes"), "is_causal"),
    "is_causal_empty_str": (lambda f, q, k, v: f(q, k, v, is_causal=""), "is_causal"),
    "is_causal_int": (lambda f, q, k, v: f(q, k, v, is_causal=1), "is_causal"),
    "is_causal_int_zero": (lambda f, q, k, v: f(q, k, v, is_causal=0), "is_causal"),
    "is_causal_none": (lambda f, q, k, v: f(q, k, v, is_causal=None), "is_causal"),
    "is_causal_float": (lambda f, q, k, v: f(q, k, v, is_causal=1.0), "is_causal"),
    "is_causal_numpy_bool": (lambda f, q, k, v: f(q, k, v, is_causal=np.True_), "is_causal"),
    "is_causal_tensor": (lambda f, q, k, v: f(q, k, v, is_causal=torch.tensor(True)),
                         "is_causal"),
    "enable_gqa_int": (lambda f, q, k, v: f(q, k, v, enable_gqa=1), "enable_gqa"),
    "dropout_p_str": (lambda f, q, k, v: f(q, k, v, dropout_p="0"), "dropout_p"),
    "dropout_p_none": (lambda f, q, k, v: f(q, k, v, dropout_p=None), "dropout_p"),
    "attn_mask_int": (lambda f, q, k, v: f(q, k, v, attn_mask=1), "attn_mask"),
    "attn_mask_list": (lambda f, q, k, v: f(q, k, v, attn_mask=[[True]]), "attn_mask"),
    "query_list": (lambda f, q, k, v: f(q.tolist(), k, v), "query"),
    "key_numpy": (lambda f, q, k, v: f(q, k.numpy(), v), "key"),
    "value_missing": (lambda f, q, k, v: f(q, k), "value"),
    "unknown_keyword": (lambda f, q, k, v: f(q, k, v, causal=True), "causal"),
}


# PyTorch's CPU flash kernel (what it dispatches to on the CPU, torch 2.15) returns NaN rows
# for is_causal with a scale <= 0: it seems to mask before scaling (-inf · -1.5 = +inf).
# Its math backend computes softmax of the masked scores, as flashattn does: compare with that.
TORCH_MATH_ONLY = {"scale_negative_causal", "scale_zero_causal"}


# flashattn.sdpa takes attn_mask with is_causal (a key must pass both); some PyTorch releases
# take the pair too, others refuse it: there, compare with the two folded into one mask.
FOLDED_CAUSAL = {
    "attn_mask_bool_is_causal": lambda f, q, k, v: f(
        q, k, v, attn_mask=KEEP & torch.ones(5, 7, dtype=torch.bool).tril()),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_accepted_as_in_torch(case):
    call = ACCEPTED[case]
    with sdpa_kernel([SDPBackend.MATH]) if case in TORCH_MATH_ONLY else contextlib.nullcontext():
        theirs, torch_error = outcome(F.scaled_dot_product_attention, call)
    if torch_error is not None and case in FOLDED_CAUSAL:
        theirs, torch_error = outcome(F.scaled_dot_product_attention, FOLDED_CAUSAL[case])
    assert torch_error is None, f"torch now refuses this call: {torch_error!r}"
    ours, error = outcome(flashattn.sdpa, call)
    assert error is None, f"flashattn refuses a call torch accepts: {error!r}"
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert rel_l2(ours.numpy(), theirs.numpy()) <= 1e-5


@pytest.mark.parametrize("call,word", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_as_in_torch(call, word):
    _, torch_error = outcome(F.scaled_dot_product_attention, call)
    assert torch_error is not None, "torch now accepts this call"
    _, error = outcome(flashattn.sdpa, call)
    assert type(error) is type(torch_error), f"torch: {torch_error!r}; flashattn: {error!r}"
    assert word in str(torch_error) and word in str(error)


# Masks both refuse: torch raises RuntimeError (IndexError for fewer than 2 dimensions),
# flashattn InvalidArgumentError naming attn_mask and the rule.
MASKS_REFUSED = {
    "keys": (KEEP[..., :6], r"attn_mask: has shape \(2, 4, 5, 6\), must broadcast to"),
    "batch": (KEEP[:1].expand(3, 4, 5, 7), r"attn_mask: has shape \(3, 4, 5, 7\)"),
    "one_dim": (KEEP[0, 0, 0], r"attn_mask: has shape \(7,\)"),
    "five_dims": (KEEP[None], r"attn_mask: has shape \(1, 2, 4, 5, 7\)"),
    "float64": (BIAS.double(), "attn_mask: dtype is torch.float64"),
    "int": (KEEP.int(), "attn_mask: dtype is torch.int32"),
    "uint8": (KEEP.to(torch.uint8), "attn_mask: dtype is torch.uint8"),
}


@pytest.mark.parametrize("mask,words", list(MASKS_REFUSED.values()), ids=list(MASKS_REFUSED))
def test_masks_refused_as_in_torch(mask, words):
    _, torch_error = outcome(F.scaled_dot_product_attention,
                             lambda f, q, k, v: f(q, k, v, attn_mask=mask))
    assert isinstance(torch_error, (RuntimeError, IndexError)), repr(torch_error)
    with pytest.raises(flashattn.InvalidArgumentError, match=words):
        flashattn.sdpa(*inputs(), attn_mask=mask)


def test_a_bias_of_another_float_dtype_is_a_deliberate_difference():
    """torch takes a float attn_mask of query's dtype (or float32) only; flashattn takes any
    of its float dtypes, the same values giving the same result."""
    query, key, value = inputs()
    half = BIAS.half()
    with pytest.raises(RuntimeError, match="attn_mask dtype"):
        F.scaled_dot_product_attention(query, key, value, attn_mask=half)
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=half.float())
    assert rel_l2(flashattn.sdpa(query, key, value, attn_mask=half).numpy(),
                  expected.numpy()) <= 1e-5


def test_a_mask_that_requires_grad_is_a_deliberate_difference():
    """torch differentiates attn_mask; flashattn computes no gradient for it and says so."""
    query, key, value = inputs()
    bias = BIAS.clone().requires_grad_()
    F.scaled_dot_product_attention(query, key, value, attn_mask=bias).sum().backward()
    assert bias.grad is not None
    with pytest.raises(flashattn.UnsupportedError,
                       match="gradients with respect to attn_mask are not computed; detach it"):
        flashattn.sdpa(query, key, value, attn_mask=bias)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf"), 1e39],
                         ids=["nan", "inf", "-inf", "beyond_float32"])
def test_non_finite_scale_is_the_one_deliberate_difference(scale):
    """PyTorch computes with it (NaN rows, or zeros for NaN); flashattn refuses it."""
    query, key, value = inputs()
    F.scaled_dot_product_attention(query, key, value, scale=scale)  # accepted by torch
    with pytest.raises(flashattn.InvalidArgumentError, match=r"scale: is .*must be finite"):
        flashattn.sdpa(query, key, value, scale=scale)


def test_scale_zero_is_the_mean_of_the_values():
    query, key, value = inputs()
    expected = value.mean(dim=2, keepdim=True).expand_as(query)
    torch.testing.assert_close(flashattn.sdpa(query, key, value, scale=0), expected)
    torch.testing.assert_close(F.scaled_dot_product_attention(query, key, value, scale=0),
                               expected)


LONE_NAME = re.compile(r"\b[qkv]\b")

# Calls both refuse for a size or dtype rule: torch raises RuntimeError, flashattn
# InvalidArgumentError (a ValueError). Both messages name the tensors query, key, value;
# flashattn's names each tensor the rule is about (torch 2.11 cut "query" off one of its).
NAMED = {
    "key_dtype": (lambda f, q, k, v: f(q, k.half(), v), ["key"]),
    "heads_not_a_multiple": (lambda f, q, k, v: f(q[:, :3], k[:, :2], v[:, :2], enable_gqa=True),
                             ["query", "key"]),
}


@pytest.mark.parametrize("call,names", list(NAMED.values()), ids=list(NAMED))
def test_sdpa_messages_name_query_key_value(call, names):
    _, torch_error = outcome(F.scaled_dot_product_attention, call)
    _, error = outcome(flashattn.sdpa, call)
    assert isinstance(torch_error, RuntimeError)
    assert isinstance(error, flashattn.InvalidArgumentError)
    assert re.search(r"\b(query|key|value)\b", str(torch_error))
    for name in names:
        assert re.search(rf"\b{name}\b", str(error)), str(error)
    assert not LONE_NAME.search(str(error)), str(error)


def test_sdpa_messages_name_query_key_value_through_the_custom_op():
    query, key, value = inputs()
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"^key: head_dim is 4, must equal query's head_dim \(8\)$"):
        flashattn.sdpa(query.requires_grad_(), key[..., :4], value[..., :4])


def test_attention_messages_keep_q_k_v():
    query, key, value = inputs()
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"^k: dtype f16 differs from q's dtype f32$"):
        flashattn.attention(q, k.half(), v)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"^key: dtype f16 differs from query's dtype f32$"):
        flashattn.sdpa(query, key.half(), value)


@pytest.mark.parametrize("message,expected", [
    ("k: head_dim is 4, must equal q's head_dim (8)",
     "key: head_dim is 4, must equal query's head_dim (8)"),
    ("q: heads (3) must be a multiple of k's heads (2)",
     "query: heads (3) must be a multiple of key's heads (2)"),
    ("backend: cuda_f16x3 takes f32 tensors only, but q is f16",
     "backend: cuda_f16x3 takes f32 tensors only, but query is f16"),
    ("out: memory overlaps v", "out: memory overlaps value"),
    ("v: seqlen is 5, must equal k's seqlen (6)", "value: seqlen is 5, must equal key's seqlen (6)"),
    ("scale: is nan, must be finite", "scale: is nan, must be finite"),
])
def test_sdpa_message_translation(message, expected):
    assert _sdpa.sdpa_message(message) == expected
