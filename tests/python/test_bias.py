"""attn_mask, a bias or boolean mask on the scores, through flashattn.attention and
flashattn.attention_backward on NumPy arrays (its cases against the float64 reference run with
the other variants' in test_variants.py): the reference's own rule, the
rows a mask leaves without keys, broadcast and strided masks read in place, the C ABI's
bias fields, and the errors. test_torch_bias.py covers torch tensors and flashattn.sdpa,
test_torch_cuda_bias.py the GPU."""

import numpy as np
import pytest

import flashattn
from flashattn import _abi, _layout, _library, _numpy
from attention_reference import reference_attention, rel_l2
from older_library import OlderOptionLibrary
from variant_cases import (BATCH, HEADS_Q, LONG_MASK_CASE_IDS, LONG_MASK_CASES, MASK_CASE_IDS,
                           MASK_CASES, MaskSpec, mask_array, numpy_case, problem)

ALL_CASES, ALL_IDS = MASK_CASES + LONG_MASK_CASES, MASK_CASE_IDS + LONG_MASK_CASE_IDS


# ---- the reference and the cases ----------------------------------------------------------

@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_every_case_changes_the_result(case):
    """Each mask moves the reference well beyond the tolerances used here (so a mask the
    library ignored could not pass), and the cases that promise rows without keys have
    them."""
    q, k, v, _, options = numpy_case(case)
    with_mask, lse = reference_attention(q, k, v, **options)
    without_mask, _ = reference_attention(q, k, v, **dict(options, attn_mask=None))
    assert rel_l2(with_mask, without_mask) > 1e-2
    if case[2]["attn_mask"].rows_without_keys:
        assert np.isneginf(lse[:, :, [1, q.shape[1] - 2]]).all()


def test_the_reference_takes_a_mask_as_its_bias():
    """A bool mask is the bias 0 / -inf; a bias of zeros changes nothing."""
    q, k, v, _ = problem(6, 9, seed=1)
    mask = mask_array(MaskSpec("bool", "hqk"), BATCH, HEADS_Q, 6, 9, seed=2)
    as_bias = np.where(mask, 0.0, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(reference_attention(q, k, v, attn_mask=mask)[0],
                                  reference_attention(q, k, v, attn_mask=as_bias)[0])
    np.testing.assert_array_equal(
        reference_attention(q, k, v, attn_mask=np.zeros((6, 9), np.float32))[0],
        reference_attention(q, k, v)[0])


# ---- NumPy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bool", "float32"])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_rows_the_mask_empties_give_zero_minus_inf_and_no_gradient(kind, backend):
    """PyTorch SDPA's rule for a fully masked row: output 0 (not NaN), here with lse -inf, dq
    0, and nothing added to dk and dv (the same gradients as with those rows' dout 0)."""
    q, k, v, dout = problem(12, 10, seed=3)
    mask = mask_array(MaskSpec(kind, "bhqk", True), BATCH, HEADS_Q, 12, 10, seed=4)
    out, lse = flashattn.attention(q, k, v, attn_mask=mask, return_lse=True, backend=backend)
    empty = [1, 10]
    assert not out[:, empty].any() and np.isneginf(lse[:, :, empty]).all()
    assert np.isfinite(out).all() and np.isfinite(np.delete(lse, empty, axis=2)).all()
    dq, dk, dv = flashattn.attention_backward(q, k, v, out, dout, lse, attn_mask=mask,
                                              backend=backend)
    assert not dq[:, empty].any() and np.isfinite(dq).all()
    quiet = dout.copy()
    quiet[:, empty] = 0
    _, dk_quiet, dv_quiet = flashattn.attention_backward(q, k, v, out, quiet, lse,
                                                         attn_mask=mask, backend=backend)
    np.testing.assert_allclose(dk, dk_quiet, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dv, dv_quiet, rtol=1e-6, atol=1e-6)


def test_a_fully_masked_batch_element_with_causal_gives_zeros():
    q, k, v, _ = problem(5, 5, seed=5)
    padding = np.ones((BATCH, 1, 1, 5), bool)
    padding[1] = False
    out, lse = flashattn.attention(q, k, v, causal=True, attn_mask=padding, return_lse=True)
    assert not out[1].any() and np.isneginf(lse[1]).all() and np.isfinite(lse[0]).all()


def test_neutral_masks_are_plain_attention():
    q, k, v, _ = problem(9, 13, seed=6)
    plain = flashattn.attention(q, k, v, causal=True)
    for neutral in (np.ones((9, 13), bool), np.zeros((BATCH, HEADS_Q, 9, 13), np.float16)):
        np.testing.assert_allclose(flashattn.attention(q, k, v, causal=True, attn_mask=neutral),
                                   plain, rtol=1e-6, atol=1e-6)


def test_broadcast_and_strided_masks_are_read_in_place():
    """np.broadcast_to's stride-0 views and sliced views reach the library as they are (no
    copy) and give the result of the same values laid out contiguously."""
    q, k, v, _ = problem(7, 11, seed=7)
    base = mask_array(MaskSpec("float32", "qk"), BATCH, HEADS_Q, 7, 22, seed=8)
    sliced = base[:, ::2]
    spread = np.broadcast_to(base[:, 1::2], (BATCH, HEADS_Q, 7, 11))
    for view in (sliced, spread, sliced.T.copy().T):  # the last in column-major order
        kept, bias = _numpy.mask_array(view, q.shape, k.shape[1])
        assert kept is view
        expected = flashattn.attention(q, k, v, attn_mask=np.ascontiguousarray(view))
        np.testing.assert_array_equal(flashattn.attention(q, k, v, attn_mask=view), expected)
    _, bias = _numpy.mask_array(spread, q.shape, k.shape[1])
    assert bias[2:6] == (BATCH, HEADS_Q, 7, 11) and bias[6:8] == (0, 0)
    _, bias = _numpy.mask_array(base[:, ::2], q.shape, k.shape[1])
    assert bias[2:6] == (BATCH, HEADS_Q, 7, 11) and bias[6:] == (0, 0, 22, 2)


def test_reversed_masks_are_copied_and_read_as_their_values():
    q, k, v, _ = problem(6, 6, seed=9)
    mask = mask_array(MaskSpec("bool", "qk"), BATCH, HEADS_Q, 6, 6, seed=10)
    np.testing.assert_array_equal(flashattn.attention(q, k, v, attn_mask=mask[::-1, ::-1]),
                                  flashattn.attention(q, k, v, attn_mask=mask[::-1, ::-1].copy()))


@pytest.mark.parametrize("seqlen_q,seqlen_k", [(0, 5), (5, 0), (0, 0)])
def test_empty_problems_with_a_mask(seqlen_q, seqlen_k):
    q, k, v, dout = problem(seqlen_q, seqlen_k, seed=11)
    mask = np.ones((seqlen_q, seqlen_k), bool)
    out, lse = flashattn.attention(q, k, v, attn_mask=mask, return_lse=True)
    assert out.shape == q.shape and not out.any() and np.isneginf(lse).all()
    dq, dk, dv = flashattn.attention_backward(q, k, v, out, dout, lse, attn_mask=mask)
    assert not (dq.any() or dk.any() or dv.any())


# ---- the C ABI -----------------------------------------------------------------------------

def test_packed_bias_reads_back_through_the_ctypes_layout():
    bias = _abi.bias_view(0x2000, _abi.BIAS_BF16, (1, 8, 100, 200), (0, 20000, 200, 1))
    variants = _abi.Variants.from_buffer_copy(_abi.pack_variants(3, 0, 1.5, 0x1000, bias))
    assert (variants.window_left, variants.window_right, variants.softcap,
            variants.alibi_slopes) == (3, 0, 1.5, 0x1000)
    assert (variants.bias, variants.bias_type, *variants.bias_shape,
            *variants.bias_strides) == bias
    without = _abi.Variants.from_buffer_copy(_abi.pack_variants(-1, -1, 0.0, 0))
    assert (without.bias, without.bias_type) == (None, _abi.BIAS_F32)


def test_a_library_without_the_bias_refuses_it_and_still_runs_the_other_variants():
    # A build from before the bias reads flashattn_variants only up to alibi_slopes.
    old = OlderOptionLibrary(_library.library(), "variants", _abi.Variants, "bias")
    assert _library.knows_bias(_library.library()) and not _library.knows_bias(old)
    q, k, v, _ = problem(5, 5, seed=12)
    mask = np.ones((5, 5), bool)
    out = np.empty_like(q)
    views = [_abi.view(a.ctypes.data, _abi.F32, a.shape, _layout.contiguous_strides(a.shape),
                       _abi.CPU) for a in (q, k, v, out)]
    bias = _abi.bias_view(mask.ctypes.data, _abi.BIAS_BOOL, (1, 1, 5, 5), (0, 0, 5, 1))
    with pytest.raises(flashattn.UnsupportedError, match="no bias or mask tensors"):
        _library.forward(*views, variants=(-1, -1, 0.0, 0, bias), lib=old)
    _library.forward(*views, variants=(2, 0, 0.0, 0, _abi.NO_BIAS), lib=old)
    np.testing.assert_array_equal(out, flashattn.attention(q, k, v, window_size=(2, 0)))


def library_views(*arrays):
    return [_abi.view(a.ctypes.data, _abi.F32, a.shape, _layout.contiguous_strides(a.shape),
                      _abi.CPU) for a in arrays]


def test_the_library_takes_no_bias_with_packed_batches_or_kv_caches():
    """Dense batches only: varlen_attention and attention_with_kvcache take no attn_mask,
    and the C ABI refuses a bias with sequences or a KV cache, naming it."""
    q, k, v, _ = problem(4, 4, seed=13)
    q, k, v = (x[:1] for x in (q, k, v))
    out = np.empty_like(q)
    mask = np.ones((4, 4), bool)
    bias = _abi.bias_view(mask.ctypes.data, _abi.BIAS_BOOL, (1, 1, 4, 4), (0, 0, 4, 1))
    cu_seqlens = np.array([0, 1, 4], np.int32)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="variants.bias: a variable-length batch takes no bias"):
        _library.forward(*library_views(q, k, v, out), variants=(-1, -1, 0.0, 0, bias),
                         sequences=(cu_seqlens.ctypes.data, cu_seqlens.ctypes.data, 2))
    lengths = np.array([4], np.int32)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="variants.bias: a KV-cache call takes no bias"):
        _library.forward(*library_views(q, k, v, out), variants=(-1, -1, 0.0, 0, bias),
                         kv_cache=(lengths.ctypes.data, _abi.NO_TENSOR, _abi.NO_TENSOR, 0, 0,
                                   1, 0))
    for call in (lambda: flashattn.varlen_attention(q[0], k[0], v[0], cu_seqlens, cu_seqlens,
                                                    attn_mask=mask),
                 lambda: flashattn.attention_with_kvcache(q, k, v, attn_mask=mask)):
        with pytest.raises(TypeError, match="attn_mask"):
            call()


# ---- errors --------------------------------------------------------------------------------

def call_forward(attn_mask, **options):
    q, k, v, _ = problem(4, 6, seed=14)
    return flashattn.attention(q, k, v, attn_mask=attn_mask, **options)


def call_backward(attn_mask, **options):
    q, k, v, dout = problem(4, 6, seed=14)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    return flashattn.attention_backward(q, k, v, out, dout, lse, attn_mask=attn_mask,
                                        **options)


SHAPE_RULE = r"must broadcast to \(batch, heads_q, seqlen_q, seqlen_k\) = \(2, 4, 4, 6\)"
ERRORS = [
    ("list", [[True] * 6] * 4, {}, TypeError,
     "attn_mask: is a list; with NumPy inputs it must be a NumPy array"),
    ("float64", np.zeros((4, 6)), {}, ValueError,
     "attn_mask: dtype is float64, must be bool .*float32 or float16"),
    ("int", np.ones((4, 6), np.int32), {}, ValueError, "attn_mask: dtype is int32"),
    ("uint8", np.ones((4, 6), np.uint8), {}, ValueError, "attn_mask: dtype is uint8"),
    ("keys", np.ones((4, 5), bool), {}, ValueError,
     r"attn_mask: has shape \(4, 5\), " + SHAPE_RULE),
    ("rows", np.ones((3, 6), bool), {}, ValueError, r"attn_mask: has shape \(3, 6\)"),
    ("kv_heads", np.ones((2, 4, 6), bool), {}, ValueError, r"attn_mask: has shape \(2, 4, 6\)"),
    ("batch", np.ones((3, 1, 4, 6), bool), {}, ValueError,
     r"attn_mask: has shape \(3, 1, 4, 6\)"),
    ("one_dim", np.ones(6, bool), {}, ValueError,
     r"attn_mask: has shape \(6,\), " + SHAPE_RULE),
    ("five_dims", np.ones((1, 2, 4, 4, 6), bool), {}, ValueError,
     r"attn_mask: has shape \(1, 2, 4, 4, 6\)"),
    ("bias_scale_zero", np.zeros((4, 6), np.float32), dict(scale=0.0), ValueError,
     "scale: is 0"),
    ("mask_scale_zero", np.ones((4, 6), bool), dict(scale=0.0), ValueError, "scale: is 0"),
]


@pytest.mark.parametrize("call", [call_forward, call_backward], ids=["fwd", "bwd"])
@pytest.mark.parametrize("mask,options,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(call, mask, options, error, words):
    with pytest.raises(error, match=words):
        call(mask, **options)

