"""The attention variants (sliding window, softcap, ALiBi, attn_mask) on PyTorch CPU tensors: the
forward against the float64 reference, autograd against float64 autograd of the dense
masked formula (16-bit: against that formula in the dtype), the raw backward, the custom
ops under opcheck and torch.compile, and the errors. Skipped without torch;
test_torch_cuda_variants.py covers the GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close  # noqa: E402
from torch_cases import (assert_as_accurate_as_plain, assert_compiled_training_step,  # noqa: E402
                         autograd_grads, mask_case, numpy_options, random_bshd,
                         reference_bshd, variant_case)
from variant_cases import (CASE_IDS, CASES, MASK_CASE_IDS, MASK_CASES,  # noqa: E402
                           alibi_slopes)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# The variants' cases and the mask cases (test_torch_bias.py has the mask's own tests).
ALL_CASES, ALL_IDS = CASES + MASK_CASES, CASE_IDS + MASK_CASE_IDS


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_forward_matches_the_reference(case, dtype):
    q, k, v, _, options = mask_case(case, dtype=dtype)
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    assert_as_accurate_as_plain((out,), (q, k, v), **options)
    if dtype == torch.float32:
        _, expected_lse = reference_bshd(q, k, v, **numpy_options(options))
        assert_lse_close(lse.numpy(), expected_lse, tol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_autograd_matches_float64_autograd(case, dtype):
    q, k, v, dout, options = mask_case(case, dtype=dtype)
    assert_as_accurate_as_plain(autograd_grads(q, k, v, dout, **options), (q, k, v, dout),
                                **options)


@pytest.mark.parametrize("case", [CASES[-1], MASK_CASES[MASK_CASE_IDS.index("bias_softcap_alibi")]],
                         ids=[CASE_IDS[-1], "bias_softcap_alibi"])
def test_raw_backward_equals_autograd_and_the_numpy_path(case):
    q, k, v, dout, options = mask_case(case)
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    raw = flashattn.attention_backward(q, k, v, out, dout, lse, **options)
    for ours, theirs in zip(raw, autograd_grads(q, k, v, dout, **options)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    arrays = [x.numpy() for x in (q, k, v, out, dout, lse)]
    for ours, theirs in zip(raw, flashattn.attention_backward(*arrays,
                                                              **numpy_options(options))):
        np.testing.assert_array_equal(ours.numpy(), theirs)


def test_slopes_get_no_gradient():
    q, k, v, dout, options = variant_case(CASES[-1])
    slopes = options["alibi_slopes"].requires_grad_()
    q.requires_grad_()
    flashattn.attention(q, k, v, **options).backward(dout)
    assert q.grad is not None and slopes.grad is None


def test_strided_slopes_are_read_as_their_values():
    q, k, v = random_bshd(1, 9, 9, 4, 2, 16, seed=1)
    wide = torch.from_numpy(alibi_slopes(4)).repeat_interleave(2)
    torch.testing.assert_close(flashattn.attention(q, k, v, alibi_slopes=wide[::2]),
                               flashattn.attention(q, k, v, alibi_slopes=wide[::2].clone()),
                               rtol=0, atol=0)


def test_ops_pass_opcheck_with_variants():
    q, k, v, dout, options = variant_case(CASES[-1])
    slopes = options["alibi_slopes"]
    forward_args = (q, k, v, True, "top_left", 0.7, None, 8, 0, 4.0, slopes)
    torch.library.opcheck(torch.ops.flashattn.attention_fwd.default, forward_args)
    out, lse = torch.ops.flashattn.attention_fwd(*forward_args)
    torch.library.opcheck(torch.ops.flashattn.attention_bwd.default,
                          (dout, q, k, v, out, lse, True, "top_left", 0.7, None, False, 8, 0,
                           4.0, slopes))
    # The variants are trailing arguments with defaults: the plain call is unchanged.
    plain, _ = torch.ops.flashattn.attention_fwd(q, k, v, True, "top_left", None, None)
    torch.testing.assert_close(plain, flashattn.attention(q, k, v, causal=True), rtol=0, atol=0)


def test_torch_compile_traces_variants_forward_and_backward():
    """fullgraph=True through a loss with every variant: both custom ops in the graphs, and
    the gradients of eager."""
    weight = torch.randn(32, 32, requires_grad=True)
    slopes = torch.from_numpy(alibi_slopes(4))

    def loss_of(x, key, value):
        query = (x @ weight).unflatten(-1, (4, 8))
        out = flashattn.attention(query, key, value, causal=True, window_size=(6, 0),
                                  softcap=5.0, alibi_slopes=slopes)
        return out.square().mean()
    key, value = (t.requires_grad_() for t in random_bshd(2, 24, 24, 4, 2, 8, seed=2)[1:])
    assert_compiled_training_step(loss_of, torch.randn(2, 24, 32), weight, key, value)


def test_raw_backward_with_variants_under_torch_compile():
    q, k, v, dout, options = variant_case(CASES[-1])
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)

    def grads(*args):
        return flashattn.attention_backward(*args, **options)
    torch._dynamo.reset()
    compiled = torch.compile(grads, fullgraph=True, backend="aot_eager")
    for ours, eager in zip(compiled(q, k, v, out, dout, lse), grads(q, k, v, out, dout, lse)):
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)


ERRORS = [
    ("numpy", lambda s: s.numpy(), TypeError,
     "alibi_slopes: is a numpy.ndarray; with torch inputs it must be a torch tensor"),
    ("float64", lambda s: s.double(), ValueError,
     "alibi_slopes: dtype is torch.float64, must be float32"),
    ("kv_heads", lambda s: s[:2], ValueError,
     r"alibi_slopes: has shape \(2,\), must be \(heads_q,\) = \(4,\)"),
    ("per_batch", lambda s: s.expand(2, 4), ValueError, r"alibi_slopes: has shape \(2, 4\)"),
    ("device", lambda s: s.to("meta"), ValueError,
     r"alibi_slopes: device is meta, must be q's device \(cpu\)"),
]


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("change,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_slope_errors_name_the_argument(change, error, words, backward):
    q, k, v = random_bshd(1, 5, 5, 4, 2, 8, seed=3)
    slopes = change(torch.from_numpy(alibi_slopes(4)))
    with pytest.raises(error, match=words):
        if backward:
            out, lse = flashattn.attention(q, k, v, return_lse=True)
            flashattn.attention_backward(q, k, v, out, torch.ones_like(out), lse,
                                         alibi_slopes=slopes)
        else:
            flashattn.attention(q, k, v, alibi_slopes=slopes)


def test_library_errors_reach_torch_callers_as_before():
    q, k, v = random_bshd(1, 5, 5, 2, 2, 8, seed=4)
    with pytest.raises(flashattn.InvalidArgumentError, match="window_right: is -3"):
        flashattn.attention(q, k, v, window_size=(2, -3))
    with pytest.raises(flashattn.InvalidArgumentError, match="softcap: is -2"):
        flashattn.attention(q.requires_grad_(), k, v, softcap=-2.0)  # through the op
    with pytest.raises(TypeError, match="window_size: is 4"):
        flashattn.attention(q, k, v, window_size=4)
