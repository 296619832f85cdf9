"""The attention variants (sliding window, softcap, ALiBi) through flashattn.attention and
flashattn.attention_backward on NumPy arrays and PyTorch CPU tensors: against the float64
reference written from the public rule (attention_reference), gradients against float64
autograd of the dense masked formula, under torch.compile, and the arguments' errors.
test_torch_cuda_variants.py runs the same cases on the GPU."""
import ctypes
import subprocess

import numpy as np
import pytest

import flashattn
from flashattn import _abi, _layout, _library
from attention_reference import (assert_lse_close, plain_attention_backward,
                                 reference_attention, rel_l2, visible_keys)
from variant_cases import (BATCH, CASE_IDS, CASES, HEAD_DIM, HEADS_KV, HEADS_Q,
                           LONG_CASE_IDS, LONG_CASES, LONG_MASK_CASE_IDS, LONG_MASK_CASES,
                           MASK_CASE_IDS, MASK_CASES, alibi_slopes, numpy_case, problem,
                           without_variants)

FP32_TOLERANCE = 1e-5
# The variants' cases and the mask cases (test_bias.py has the mask's own tests).
ALL_CASES = CASES + LONG_CASES + MASK_CASES + LONG_MASK_CASES
ALL_IDS = CASE_IDS + LONG_CASE_IDS + MASK_CASE_IDS + LONG_MASK_CASE_IDS


# ---- the reference itself ------------------------------------------------------------------

def test_the_mask_rule_as_written():
    # Without causal the alignment is bottom-right: off = 6 - 4 = 2.
    expected = np.array([[0, 1, 1, 1, 0, 0],
                         [0, 0, 1, 1, 1, 0],
                         [0, 0, 0, 1, 1, 1],
                         [0, 0, 0, 0, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(visible_keys(4, 6, window_size=(1, 1)), expected)
    # Causal top-left (off 0) caps the right side at 0.
    np.testing.assert_array_equal(visible_keys(3, 3, True, "top_left", (1, 5)),
                                  np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=bool))
    assert visible_keys(5, 5, window_size=(-1, -1)).all()


def test_slopes_are_the_alibi_papers():
    np.testing.assert_allclose(alibi_slopes(8), [2.0**-i for i in range(1, 9)])


@pytest.mark.parametrize("case", CASES + LONG_CASES, ids=CASE_IDS + LONG_CASE_IDS)
def test_every_case_changes_the_result(case):
    """Each case's variants move the reference well beyond the tolerances used here, so a
    variant the library ignored could not pass."""
    q, k, v, _, options = numpy_case(case)
    with_variants, _ = reference_attention(q, k, v, **options)
    plain, _ = reference_attention(q, k, v, **without_variants(options))
    assert rel_l2(with_variants, plain) > 1e-2


# ---- NumPy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", [None, "cpu", "reference"])
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_numpy_forward_matches_the_reference(case, backend):
    q, k, v, _, options = numpy_case(case)
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    expected, expected_lse = reference_attention(q, k, v, **options)
    assert out.shape == q.shape and out.dtype == np.float32
    assert rel_l2(out, expected) <= FP32_TOLERANCE
    assert_lse_close(lse, expected_lse, tol=1e-4)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_numpy_gradients_match_the_oracle(case, backend):
    q, k, v, dout, options = numpy_case(case)
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    grads = flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend, **options)
    _, *expected = plain_attention_backward(q, k, v, dout, **options)
    for name, grad, x, want in zip("qkv", grads, (q, k, v), expected):
        assert grad.shape == x.shape and grad.dtype == np.float32, name
        assert rel_l2(grad, want) <= FP32_TOLERANCE, name


@pytest.mark.parametrize("case", CASES + MASK_CASES, ids=CASE_IDS + MASK_CASE_IDS)
def test_numpy_float16_is_as_accurate_as_float16_arithmetic(case):
    """out and the gradients within twice the error of the plain computation in float16
    (against the float64 oracle on the same rounded inputs), plus a quarter ulp."""
    q, k, v, dout, options = numpy_case(case, np.float16)
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    grads = flashattn.attention_backward(q, k, v, out, dout, lse, **options)
    expected = plain_attention_backward(q, k, v, dout, **options)
    in_f16 = plain_attention_backward(q, k, v, dout, dtype=np.float16, **options)
    floor = np.finfo(np.float16).eps / 4
    for name, ours, want, plain in zip(("out", "dq", "dk", "dv"), (out, *grads), expected,
                                       in_f16):
        assert ours.dtype == np.float16, name
        assert rel_l2(ours, want) <= 2 * rel_l2(plain, want) + floor, name


def test_rows_a_window_empties_give_zero_minus_inf_and_no_gradient():
    # Without causal, off = 10 - 30 = -20: row i sees keys i - 21 .. i - 19, none below 19.
    q, k, v, dout = problem(30, 10, seed=1)
    out, lse = flashattn.attention(q, k, v, window_size=(1, 1), return_lse=True)
    assert np.all(out[:, :19] == 0) and np.all(np.isneginf(lse[:, :, :19]))
    assert np.all(np.isfinite(lse[:, :, 19:]))
    dq, _, _ = flashattn.attention_backward(q, k, v, out, dout, lse, window_size=(1, 1))
    assert np.all(dq[:, :19] == 0) and not np.isnan(dq).any()


def test_a_window_of_one_key_copies_its_value_and_has_no_dq():
    q, k, v, dout = problem(7, 7, seed=8)
    out, lse = flashattn.attention(q, k, v, window_size=(0, 0), return_lse=True)
    np.testing.assert_allclose(out, np.repeat(v, HEADS_Q // HEADS_KV, axis=2), rtol=1e-6)
    dq, dk, dv = flashattn.attention_backward(q, k, v, out, dout, lse, window_size=(0, 0))
    # A softmax over one key is 1 whatever the score: dq and dk vanish (up to rounding).
    assert np.abs(dq).max() <= 1e-5 and np.abs(dk).max() <= 1e-5
    np.testing.assert_allclose(dv, dout.reshape(BATCH, 7, HEADS_KV, -1, HEAD_DIM).sum(axis=3),
                               rtol=1e-5, atol=1e-6)


def test_keys_outside_the_window_are_never_read():
    """NaN in key 0 reaches only the rows whose window holds it (standard attention's
    propagation, restricted to the keys each row sees)."""
    q, k, v, _ = problem(12, 12, seed=2)
    k[:, 0] = np.nan
    out = flashattn.attention(q, k, v, causal=True, window_size=(2, 0))
    assert np.isnan(out[:, :3]).all() and np.isfinite(out[:, 3:]).all()


@pytest.mark.parametrize("seqlen_q,seqlen_k", [(0, 5), (5, 0), (0, 0)])
def test_empty_problems_with_variants(seqlen_q, seqlen_k):
    q, k, v, dout = problem(seqlen_q, seqlen_k, seed=3)
    options = dict(window_size=(2, 1), softcap=3.0, alibi_slopes=alibi_slopes(HEADS_Q))
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    assert out.shape == q.shape and not out.any() and np.isneginf(lse).all()
    dq, dk, dv = flashattn.attention_backward(q, k, v, out, dout, lse, **options)
    assert not (dq.any() or dk.any() or dv.any())


def test_strided_slopes_are_read_as_their_values():
    q, k, v, _ = problem(9, 9, seed=4)
    wide = np.repeat(alibi_slopes(HEADS_Q), 2)
    np.testing.assert_array_equal(flashattn.attention(q, k, v, alibi_slopes=wide[::2]),
                                  flashattn.attention(q, k, v, alibi_slopes=wide[::2].copy()))


def test_open_window_and_zero_softcap_are_plain_attention():
    q, k, v, _ = problem(9, 13, seed=5)
    np.testing.assert_array_equal(
        flashattn.attention(q, k, v, causal=True, window_size=(-1, -1), softcap=0.0),
        flashattn.attention(q, k, v, causal=True))
    np.testing.assert_array_equal(
        flashattn.attention(q, k, v, window_size=[100, 2**40]),
        flashattn.attention(q, k, v, window_size=(-1, -1)))


class PreVariantsLibrary:
    """A build from before the variants, as ctypes sees it: no flashattn_forward_variants."""

    def __init__(self, lib):
        for name in ("flashattn_forward", "flashattn_backward", "flashattn_last_error"):
            setattr(self, name, getattr(lib, name))


def test_a_library_without_variants_refuses_them_and_still_runs_plain_attention():
    old = PreVariantsLibrary(_library.library())
    assert not _abi.has_variants(old)
    q, k, v, _ = problem(5, 5, seed=6)
    out = np.empty_like(q)
    views = [_abi.view(a.ctypes.data, _abi.F32, a.shape, _layout.contiguous_strides(a.shape),
                       _abi.CPU) for a in (q, k, v, out)]
    with pytest.raises(flashattn.UnsupportedError, match="predates them"):
        _library.forward(*views, variants=(2, 0, 0.0, 0), lib=old)
    with pytest.raises(flashattn.UnsupportedError, match="predates them"):
        _library.backward(*views, views[3], 0, *views[:3], variants=(-1, -1, 1.0, 0),
                          lib=old)
    _library.forward(*views, variants=_abi.NO_VARIANTS, lib=old)
    np.testing.assert_array_equal(out, flashattn.attention(q, k, v))


def test_packed_variants_read_back_through_the_ctypes_layout():
    packed = _abi.pack_variants(7, -1, 2.5, 0x1000)
    variants = _abi.Variants.from_buffer_copy(packed)
    assert variants.struct_size == ctypes.sizeof(_abi.Variants) == len(packed)
    assert (variants.window_left, variants.window_right, variants.softcap,
            variants.alibi_slopes) == (7, -1, 2.5, 0x1000)


# ---- the command-line tool ----------------------------------------------------------------

def cli_tool():
    """The flashattn tool of the build (or install) whose library the package loads."""
    folder = _library.library_path().parent
    for tool in (folder / "tools" / "flashattn" / "flashattn", folder / "bin" / "flashattn"):
        if tool.is_file():
            return tool
    pytest.skip(f"no flashattn command-line tool beside {folder}")


def test_the_cli_takes_the_same_variants(tmp_path):
    """`flashattn run --window --softcap --alibi` computes what flashattn.attention computes
    with FlashAttention's keywords and the standard slopes."""
    tool = cli_tool()
    q, k, v, _ = problem(21, 30, seed=9)
    for name, array in zip("qkv", (q, k, v)):
        np.save(tmp_path / f"{name}.npy", array)
    subprocess.run([str(tool), "run", "--device", "cpu", "--backend", "cpu",
                    *(f"--{n}={tmp_path / n}.npy" for n in "qkv"), "--out", str(tmp_path / "o.npy"),
                    "--causal", "bottom_right", "--window", "4,-1", "--softcap", "2.5", "--alibi"],
                   check=True, capture_output=True)
    expected = flashattn.attention(q, k, v, causal=True, causal_alignment="bottom_right",
                                   window_size=(4, -1), softcap=2.5,
                                   alibi_slopes=alibi_slopes(HEADS_Q), backend="cpu")
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), expected, rtol=1e-6, atol=1e-6)
    for command in ("run", "check", "bench"):
        shown = subprocess.run([str(tool), command, "--help"], check=True, capture_output=True,
                               text=True).stdout
        assert all(flag in shown for flag in ("--window LEFT,RIGHT", "--softcap C", "--alibi"))


# ---- errors --------------------------------------------------------------------------------

def call_numpy(**options):
    q, k, v, _ = problem(4, 4, seed=7)
    return flashattn.attention(q, k, v, **options)


def call_numpy_backward(**options):
    q, k, v, dout = problem(4, 4, seed=7)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    return flashattn.attention_backward(q, k, v, out, dout, lse, **options)


ERRORS = [
    ("window_int", dict(window_size=5), TypeError, r"window_size: is 5, must be a \(left, "),
    ("window_one_side", dict(window_size=(1,)), TypeError, "window_size: is"),
    ("window_float", dict(window_size=(1.5, 0)), TypeError,
     "window_size: its left side is a float"),
    ("window_bool", dict(window_size=(0, True)), TypeError,
     "window_size: its right side is a bool"),
    ("window_below_open", dict(window_size=(-2, 0)), ValueError,
     "window_left: is -2, must be >= -1"),
    ("softcap_negative", dict(softcap=-1.0), ValueError, "softcap: is -1, must be finite"),
    ("softcap_nan", dict(softcap=float("nan")), ValueError, "softcap: is nan"),
    ("softcap_str", dict(softcap="30"), TypeError, "softcap: is a str"),
    ("softcap_huge", dict(softcap=1e40), ValueError, "softcap: is 1e.40, beyond float32"),
    ("softcap_scale_zero", dict(softcap=1.0, scale=0.0), ValueError, "scale: is 0"),
    ("alibi_float64", dict(alibi_slopes=alibi_slopes(HEADS_Q).astype(np.float64)),
     ValueError, "alibi_slopes: dtype is float64, must be float32"),
    ("alibi_kv_heads", dict(alibi_slopes=alibi_slopes(HEADS_KV)), ValueError,
     r"alibi_slopes: has shape \(2,\), must be \(heads_q,\) = \(4,\)"),
    ("alibi_per_batch", dict(alibi_slopes=np.tile(alibi_slopes(HEADS_Q), (BATCH, 1))),
     ValueError, r"alibi_slopes: has shape \(2, 4\)"),
    ("alibi_list", dict(alibi_slopes=[0.5] * HEADS_Q), TypeError,
     "alibi_slopes: is a list; with NumPy inputs it must be a NumPy array"),
    ("alibi_scale_zero", dict(alibi_slopes=alibi_slopes(HEADS_Q), scale=0), ValueError,
     "scale: is 0"),
]


@pytest.mark.parametrize("call", [call_numpy, call_numpy_backward], ids=["fwd", "bwd"])
@pytest.mark.parametrize("options,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_numpy_errors_name_the_argument(call, options, error, words):
    with pytest.raises(error, match=words):
        call(**options)


def test_the_librarys_own_errors_keep_their_class():
    with pytest.raises(flashattn.InvalidArgumentError):
        call_numpy(softcap=-1.0)
    with pytest.raises(flashattn.InvalidArgumentError):
        call_numpy(window_size=(0, -5))
