"""Variable-length (packed) batches through flashattn.varlen_attention and
varlen_attention_backward on NumPy arrays, on the CPU backends: each sequence against
flashattn.attention run on it alone and against the float64 reference, sequences without
queries or keys, the arguments' errors, and libraries from before packed batches and
before the max_seqlen fields.
test_torch_varlen.py and test_torch_cuda_varlen.py cover PyTorch."""
import numpy as np
import pytest

import flashattn
from flashattn import _abi, _layout, _library
from attention_reference import (assert_lse_close, plain_attention_backward,
                                 reference_attention, rel_l2)
from older_library import OlderOptionLibrary
from variant_cases import options_with_slopes
from varlen_cases import CASE_IDS, CASES, LENGTHS, packed_problem, per_sequence, prefix_sums

BACKENDS = ["reference", "cpu"]
FP32_TOLERANCE = 1e-5


def numpy_case(case, dtype=np.float32):
    """q, k, v, dout, cu_seqlens_q, cu_seqlens_k and the options of one of CASES (4 query
    heads on 2 kv heads)."""
    _, lengths, options = case
    return (*packed_problem(lengths, dtype=dtype, seed=len(lengths)),
            options_with_slopes(options, 4))


def dense_attention(backend):
    """flashattn.attention's (out, lse) on one dense batch."""
    return lambda q, k, v, **options: flashattn.attention(q, k, v, return_lse=True,
                                                          backend=backend, **options)


def dense_backward(backend):
    """(dq, dk, dv) of flashattn.attention's forward on one dense batch."""
    def grads(q, k, v, dout, **options):
        out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
        return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                            **options)
    return grads


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_each_sequence_alone(case, backend):
    q, k, v, _, cu_q, cu_k, options = numpy_case(case)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True,
                                          backend=backend, **options)
    assert out.shape == q.shape and out.dtype == np.float32 and out.flags.c_contiguous
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32
    expected, expected_lse = per_sequence(reference_attention, cu_q, cu_k)(q, k, v, **options)
    assert rel_l2(out, expected) <= FP32_TOLERANCE
    assert_lse_close(lse, expected_lse, tol=1e-4)
    dense, dense_lse = per_sequence(dense_attention(backend), cu_q, cu_k)(q, k, v, **options)
    assert rel_l2(out, dense) <= FP32_TOLERANCE
    assert_lse_close(lse, dense_lse, tol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradients_match_each_sequence_alone(case, backend):
    q, k, v, dout, cu_q, cu_k, options = numpy_case(case)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True,
                                          backend=backend, **options)
    grads = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                backend=backend, **options)
    _, *expected = per_sequence(plain_attention_backward, cu_q, cu_k)(q, k, v, dout, **options)
    dense = per_sequence(dense_backward(backend), cu_q, cu_k)(q, k, v, dout, **options)
    for name, grad, x, want, alone in zip(("dq", "dk", "dv"), grads, (q, k, v), expected,
                                          dense):
        assert grad.shape == x.shape and grad.dtype == np.float32, name
        assert rel_l2(grad, want) <= FP32_TOLERANCE, name
        assert rel_l2(grad, alone) <= FP32_TOLERANCE, name


def test_sequences_without_keys_or_queries():
    """A sequence without keys gives its rows 0, lse -inf and dq 0; keys of a sequence
    without queries get dk and dv 0."""
    q, k, v, dout, cu_q, cu_k, _ = numpy_case(CASES[0])
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True)
    dq, dk, dv = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k)
    for b, (seqlen_q, seqlen_k) in enumerate(LENGTHS):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if seqlen_k == 0:
            assert np.all(out[rows] == 0) and np.all(dq[rows] == 0)
            assert np.all(np.isneginf(lse[:, rows]))
        if seqlen_q == 0:
            assert np.all(dk[keys] == 0) and np.all(dv[keys] == 0)
    assert np.isfinite(lse[:, cu_q[0]:cu_q[1]]).all()


def test_rows_see_only_their_own_sequence():
    """NaN in every key of sequence 0 reaches only sequence 0's rows."""
    q, k, v, _, cu_q, cu_k, _ = numpy_case(CASES[0])
    k[cu_k[0]:cu_k[1]] = np.nan
    out = flashattn.varlen_attention(q, k, v, cu_q, cu_k)
    assert np.isnan(out[:cu_q[1]]).all() and np.isfinite(out[cu_q[1]:]).all()


@pytest.mark.parametrize("lengths", [[], [(0, 0)], [(0, 4), (0, 2)], [(3, 0), (2, 0)]],
                         ids=["batch0", "one_empty", "no_queries", "no_keys"])
def test_empty_batches(lengths):
    q, k, v, dout, cu_q, cu_k = packed_problem(lengths)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, causal=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    assert not out.any() and np.isneginf(lse).all()
    grads = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                causal=True)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert not any(g.any() for g in grads)


def test_max_seqlen_at_or_above_the_longest_and_strided_prefix_sums():
    q, k, v, _, cu_q, cu_k, _ = numpy_case(CASES[1])
    expected = flashattn.varlen_attention(q, k, v, cu_q, cu_k, causal=True)
    longest_q, longest_k = max(s for s, _ in LENGTHS), max(s for _, s in LENGTHS)
    for max_q, max_k in ((longest_q, longest_k), (np.int64(1000), 2**40)):
        np.testing.assert_array_equal(
            flashattn.varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, causal=True),
            expected)
    strided_q, strided_k = (np.repeat(cu, 2)[::2] for cu in (cu_q, cu_k))
    np.testing.assert_array_equal(
        flashattn.varlen_attention(q, k, v, strided_q, strided_k, causal=True), expected)


def test_max_seqlen_is_checked_by_the_library_or_else_by_the_package(monkeypatch):
    q, k, v, _, cu_q, cu_k, _ = numpy_case(CASES[0])
    short = r"max_seqlen_q: is 11, less than the longest sequence in cu_seqlens_q \(sequence 5: 12"
    with pytest.raises(ValueError, match="^sequences." + short):  # the library's own check
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=11)
    # A build from before the max_seqlen fields reads flashattn_sequences up to batch.
    old = OlderOptionLibrary(_library.library(), "sequences", _abi.Sequences, "max_seqlen_q")
    assert _library.knows_max_seqlen(_library.library()) and not _library.knows_max_seqlen(old)
    expected = flashattn.varlen_attention(q, k, v, cu_q, cu_k, 12, 15, causal=True)
    monkeypatch.setattr(_library, "library", lambda: old)
    np.testing.assert_array_equal(
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, 12, 15, causal=True), expected)
    with pytest.raises(ValueError, match="^" + short):
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=11)


def test_host_prefix_sums_are_checked_even_when_unchecked_is_asked():
    """checked=False is for CUDA tensors (no host wait); host arrays are read anyway, so the
    call is checked and errors as before."""
    q, k, v, _, cu_q, cu_k, _ = numpy_case(CASES[1])
    expected = flashattn.varlen_attention(q, k, v, cu_q, cu_k, causal=True)
    np.testing.assert_array_equal(
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, 12, 15, causal=True, checked=False),
        expected)
    with pytest.raises(ValueError, match=r"cu_seqlens_q: entry 0 is 1, must be 0"):
        flashattn.varlen_attention(q, k, v, changed(cu_q, 0, 1), cu_k, 12, 15, checked=False)
    with pytest.raises(ValueError, match=r"max_seqlen_q: is None; checked=False needs it"):
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, checked=False)


def changed(cu_seqlens, index, delta):
    cu_seqlens = cu_seqlens.copy()
    cu_seqlens[index] += delta
    return cu_seqlens


# (id, change: a function of (cu_seqlens_q, cu_seqlens_k) giving the keywords to replace,
# error, words).
ERRORS = [
    ("start_not_0", lambda cq, ck: dict(cu_seqlens_q=changed(cq, 0, 1)), ValueError,
     "cu_seqlens_q: entry 0 is 1, must be 0"),
    ("decreasing", lambda cq, ck: dict(cu_seqlens_k=changed(ck, 1, 5)), ValueError,
     r"cu_seqlens_k: entry 2 \(10\) is less than entry 1 \(12\); prefix sums must be "
     r"nondecreasing"),
    ("last_not_total", lambda cq, ck: dict(cu_seqlens_q=changed(cq, -1, -1)), ValueError,
     r"cu_seqlens_q: last entry is 37, must equal q's seqlen \(38\)"),
    ("int64", lambda cq, ck: dict(cu_seqlens_k=ck.astype(np.int64)), ValueError,
     "cu_seqlens_k: dtype is int64, must be int32"),
    ("fewer_entries", lambda cq, ck: dict(cu_seqlens_k=ck[:-1]), ValueError,
     r"cu_seqlens_k: has 9 entries, must have as many as cu_seqlens_q \(10\)"),
    ("no_entries", lambda cq, ck: dict(cu_seqlens_q=cq[:0], cu_seqlens_k=ck[:0]), ValueError,
     r"cu_seqlens_q: has shape \(0,\), must be \(batch \+ 1,\)"),
    ("2d", lambda cq, ck: dict(cu_seqlens_q=cq[None]), ValueError,
     r"cu_seqlens_q: has shape \(1, 10\), must be \(batch \+ 1,\)"),
    ("list", lambda cq, ck: dict(cu_seqlens_q=cq.tolist()), TypeError,
     "cu_seqlens_q: is a list; with NumPy inputs it must be a NumPy array"),
    ("max_seqlen_q_short", lambda cq, ck: dict(max_seqlen_q=11), ValueError,
     r"max_seqlen_q: is 11, less than the longest sequence in cu_seqlens_q \(sequence 5: 12"),
    ("max_seqlen_k_short", lambda cq, ck: dict(max_seqlen_k=0), ValueError,
     r"max_seqlen_k: is 0, less than the longest sequence in cu_seqlens_k \(sequence 8: 15"),
    ("max_seqlen_negative", lambda cq, ck: dict(max_seqlen_q=-1), ValueError,
     r"max_seqlen_q: is -1, must be >= 0"),
    ("max_seqlen_float", lambda cq, ck: dict(max_seqlen_k=12.0), TypeError,
     "max_seqlen_k: is a float, must be an int or None"),
]


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("change,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(change, error, words, backward):
    q, k, v, dout, cu_q, cu_k, _ = numpy_case(CASES[0])
    arguments = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, **change(cu_q, cu_k)}
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True)
    with pytest.raises(error, match=words):
        if backward:
            flashattn.varlen_attention_backward(q, k, v, out, dout, lse, **arguments)
        else:
            flashattn.varlen_attention(q, k, v, **arguments)


def test_layout_errors_name_the_argument():
    q, k, v, dout, cu_q, cu_k, _ = numpy_case(CASES[0])
    with pytest.raises(ValueError, match=r"q: has shape \(1, 38, 4, 16\), must have 3 "
                                         r"dimensions \(total_q, heads_q, head_dim\)"):
        flashattn.varlen_attention(q[None], k, v, cu_q, cu_k)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True)
    with pytest.raises(ValueError, match=r"lse: has shape \(1, 4, 38\), must be \(heads_q, "
                                         r"total_q\) = \(4, 38\)"):
        flashattn.varlen_attention_backward(q, k, v, out, dout, lse[None], cu_q, cu_k)
    with pytest.raises(TypeError, match="v: is a list"):
        flashattn.varlen_attention(q, k, v.tolist(), cu_q, cu_k)


class PreSequencesLibrary:
    """A build from before packed batches, as ctypes sees it: the variants, no
    flashattn_forward_with."""

    def __init__(self, lib):
        for name in ("flashattn_forward", "flashattn_forward_variants", "flashattn_backward",
                     "flashattn_last_error"):
            setattr(self, name, getattr(lib, name))


def test_a_library_without_packed_batches_refuses_them_and_still_runs_the_rest():
    old = PreSequencesLibrary(_library.library())
    assert _abi.has_variants(old) and not _abi.has_forward_with(old)
    q, k, v, _ = (np.ascontiguousarray(x[None]) for x in numpy_case(CASES[0])[:4])
    cu_q, cu_k = prefix_sums(LENGTHS)
    out = np.empty_like(q)
    views = [_abi.view(a.ctypes.data, _abi.F32, a.shape, _layout.contiguous_strides(a.shape),
                       _abi.CPU) for a in (q, k, v, out)]
    sequences = (cu_q.ctypes.data, cu_k.ctypes.data, len(LENGTHS))
    with pytest.raises(flashattn.UnsupportedError, match="no variable-length batches"):
        _library.forward(*views, sequences=sequences, lib=old)
    with pytest.raises(flashattn.UnsupportedError, match="no variable-length batches"):
        _library.backward(*views, views[3], 0, *views[:3], sequences=sequences, lib=old)
    _library.forward(*views, variants=(2, 0, 0.0, 0), lib=old)  # flashattn_forward_variants
    np.testing.assert_array_equal(out, flashattn.attention(q, k, v, window_size=(2, 0)))


class CallLog:
    """The library, logging the names of the functions called through it."""

    def __init__(self, lib):
        self.lib, self.calls = lib, []

    def __getattr__(self, name):
        function = getattr(self.lib, name)

        def logged(*args):
            self.calls.append(name)
            return function(*args)
        return logged


def test_the_forward_goes_through_flashattn_forward_with():
    lib = CallLog(_library.library())
    q, k, v, _, cu_q, cu_k, _ = numpy_case(CASES[0])
    out = np.empty_like(q)
    views = [_abi.view(a.ctypes.data, _abi.F32, (1, *a.shape),
                       _layout.contiguous_strides((1, *a.shape)), _abi.CPU)
             for a in (q, k, v, out)]
    for options in (dict(), dict(variants=(1, 1, 0.0, 0)),
                    dict(sequences=(cu_q.ctypes.data, cu_k.ctypes.data, len(LENGTHS)))):
        _library.forward(*views, lib=lib, **options)
    assert lib.calls == ["flashattn_forward_with"] * 3
