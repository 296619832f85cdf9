"""flashattn.attention on NumPy arrays (the CPU backends) against the float64 reference."""
import numpy as np
import pytest

import flashattn
from flashattn import _library, _numpy
import edge_cases
from attention_reference import assert_lse_close, reference_attention, rel_l2
from edge_cases import EMPTY_IDS, EMPTY_SIZES

ALIGNMENTS = ("top_left", "bottom_right")


def random_qkv(rng, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32):
    def draw(seqlen, heads):
        return rng.standard_normal((batch, seqlen, heads, head_dim)).astype(dtype)
    return draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv)


def check_against_reference(q, k, v, tol=1e-5, **options):
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    options.pop("backend", None)
    expected, expected_lse = reference_attention(q, k, v, **options)
    assert out.shape == q.shape and out.dtype == q.dtype and out.flags.c_contiguous
    assert lse.shape == expected_lse.shape and lse.dtype == np.float32
    assert rel_l2(out, expected) <= tol
    assert_lse_close(lse, expected_lse, tol=10 * tol)


@pytest.mark.parametrize("seed", range(16))
def test_random_shapes_match_reference(seed):
    rng = np.random.default_rng(seed)
    heads_kv = int(rng.integers(1, 4))
    heads_q = heads_kv * int(rng.choice([1, 2, 4]))  # grouped-query attention when > 1
    sizes = dict(batch=int(rng.integers(1, 3)), seqlen_q=int(rng.integers(1, 80)),
                 seqlen_k=int(rng.integers(1, 80)), heads_q=heads_q, heads_kv=heads_kv,
                 head_dim=int(rng.choice([1, 3, 8, 32, 64, 80, 128])))
    q, k, v = random_qkv(rng, **sizes)
    check_against_reference(q, k, v, causal=bool(rng.integers(2)),
                            causal_alignment=str(rng.choice(ALIGNMENTS)),
                            backend=rng.choice([None, "cpu", "reference"]))


@pytest.mark.parametrize("alignment", ALIGNMENTS)
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(17, 17), (9, 40), (40, 9)])
def test_causal_alignments(alignment, seqlen_q, seqlen_k):
    q, k, v = random_qkv(np.random.default_rng(1), 2, seqlen_q, seqlen_k, 4, 2, 32)
    check_against_reference(q, k, v, causal=True, causal_alignment=alignment)


def test_bottom_right_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = random_qkv(np.random.default_rng(2), 1, 10, 4, 2, 2, 16)
    out, lse = flashattn.attention(q, k, v, causal=True, causal_alignment="bottom_right",
                                   return_lse=True)
    # off = seqlen_k - seqlen_q = -6: query rows 0..5 see no key.
    assert np.all(out[:, :6] == 0) and np.all(np.isneginf(lse[:, :, :6]))
    assert np.all(np.isfinite(lse[:, :, 6:]))


def test_causal_alignment_is_ignored_without_causal():
    q, k, v = random_qkv(np.random.default_rng(3), 1, 5, 9, 2, 1, 8)
    np.testing.assert_array_equal(
        flashattn.attention(q, k, v, causal_alignment="top_left"),
        flashattn.attention(q, k, v, causal_alignment="bottom_right"))


@pytest.mark.parametrize("scale", [0.7, 3, -0.7, 0.0, -0.0, 0, True, np.float32(-2.5),
                                   np.int64(2), 1e-30, -30.0], ids=repr)
def test_any_finite_scale(scale):
    q, k, v = random_qkv(np.random.default_rng(4), 1, 12, 12, 2, 2, 16)
    check_against_reference(q, k, v, scale=scale, causal=True)
    check_against_reference(q, k, v, scale=scale, backend="reference")


def test_zero_scale_averages_the_visible_values():
    q, k, v = random_qkv(np.random.default_rng(4), 1, 6, 6, 1, 1, 8)
    out = flashattn.attention(q, k, v, scale=0.0, causal=True)
    expected = np.cumsum(v, axis=1) / np.arange(1, 7)[None, :, None, None]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_float16():
    q, k, v = random_qkv(np.random.default_rng(5), 2, 33, 47, 4, 2, 64, np.float16)
    out = flashattn.attention(q, k, v, causal=True)
    assert out.dtype == np.float16
    # fp32 arithmetic: the error is the rounding of the output to fp16 (2^-11 relative).
    assert rel_l2(out, reference_attention(q, k, v, causal=True)[0]) < 1e-3


def test_lse_only_when_asked():
    q, k, v = random_qkv(np.random.default_rng(6), 1, 3, 3, 1, 1, 4)
    assert isinstance(flashattn.attention(q, k, v), np.ndarray)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    assert lse.shape == (1, 1, 3)


def strided_views(rng):
    """Views the kernels read in place: seqlen stride 2 and head_dim padded (q); (batch,
    heads, seqlen, head_dim) arrays transposed (k, v)."""
    big_q = rng.standard_normal((2, 30, 3, 40)).astype(np.float32)
    q = big_q[:, ::2, :, :24]
    k = rng.standard_normal((2, 3, 21, 24)).astype(np.float32).transpose(0, 2, 1, 3)
    v = rng.standard_normal((2, 3, 21, 24)).astype(np.float32).transpose(0, 2, 1, 3)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
def test_strided_views_are_read_in_place(causal):
    q, k, v = strided_views(np.random.default_rng(7))
    for a in (q, k, v):
        assert not a.flags.c_contiguous
        assert _numpy.kernel_array("a", a)[0] is a  # no copy
    check_against_reference(q, k, v, causal=causal, causal_alignment="bottom_right")


def unaligned_copy(a):
    """a's values in memory one byte past an element boundary."""
    buffer = np.empty(a.nbytes + 1, np.uint8)
    copy = buffer[1:].view(a.dtype).reshape(a.shape)
    copy[...] = a
    assert not copy.flags.aligned
    return copy


@pytest.mark.parametrize("make_view", [
    lambda a: a[:, ::-1],                               # negative seqlen stride
    lambda a: a[..., ::2],                              # head_dim not contiguous
    lambda a: np.asfortranarray(a),                     # column-major
    lambda a: unaligned_copy(a),
], ids=["negative", "head_dim_stride_2", "fortran", "unaligned"])
def test_views_the_kernels_cannot_read_are_copied(make_view):
    rng = np.random.default_rng(8)
    q, k, v = (make_view(a) for a in random_qkv(rng, 2, 11, 13, 2, 2, 16))
    for a in (q, k, v):
        assert _numpy.kernel_array("a", a)[0] is not a
    check_against_reference(q, k, v, causal=True)


def test_inputs_are_not_written():
    q, k, v = random_qkv(np.random.default_rng(9), 1, 8, 8, 2, 2, 8)
    copies = [a.copy() for a in (q, k, v)]
    flashattn.attention(q, k, v, causal=True, return_lse=True)
    for a, before in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, before)


def valid_qkv():
    return random_qkv(np.random.default_rng(10), 2, 5, 6, 4, 2, 8)


# (name, how to break a valid call, exception, words of the message)
ERRORS = [
    ("rank", lambda q, k, v: ((q[0], k, v), {}), ValueError, "q: has shape (5, 4, 8)"),
    ("dtype", lambda q, k, v: ((q, k.astype(np.float64), v), {}), ValueError,
     "k: dtype is float64"),
    ("dtype_mismatch", lambda q, k, v: ((q, k.astype(np.float16), v), {}), ValueError,
     "k: dtype f16 differs from q's dtype f32"),
    ("head_dim", lambda q, k, v: ((q, k[..., :4], v), {}), ValueError,
     "k: head_dim is 4, must equal q's head_dim (8)"),
    ("heads", lambda q, k, v: ((q[:, :, :3], k, v), {}), ValueError,
     "q: heads (3) must be a multiple of k's heads (2)"),
    ("v_seqlen", lambda q, k, v: ((q, k, v[:, :5]), {}), ValueError, "v: seqlen is 5"),
    ("no_heads", lambda q, k, v: ((q[:, :, :0], k, v), {}), ValueError,
     "q: heads is 0, must be >= 1"),
    ("no_head_dim", lambda q, k, v: ((q[..., :0], k[..., :0], v[..., :0]), {}), ValueError,
     "q: head_dim is 0, must be >= 1"),
    ("scale_nan", lambda q, k, v: ((q, k, v), {"scale": float("nan")}), ValueError,
     "scale: is nan, must be finite"),
    ("scale_inf", lambda q, k, v: ((q, k, v), {"scale": -np.inf}), ValueError,
     "scale: is -inf, must be finite"),
    ("scale_beyond_float32", lambda q, k, v: ((q, k, v), {"scale": 1e39}), ValueError,
     "scale: is 1e.39, beyond float32's range"),
    ("scale_type", lambda q, k, v: ((q, k, v), {"scale": "0.5"}), TypeError,
     "scale: is a str, must be a float"),
    ("causal_type", lambda q, k, v: ((q, k, v), {"causal": "yes"}), TypeError,
     "causal: is a str, must be a bool"),
    ("alignment", lambda q, k, v: ((q, k, v), {"causal": True, "causal_alignment": "left"}),
     ValueError, "causal_alignment: is 'left'"),
    ("backend_name", lambda q, k, v: ((q, k, v), {"backend": "gpu"}), ValueError,
     "backend: is 'gpu'"),
    ("backend_device", lambda q, k, v: ((q, k, v), {"backend": "cuda_tiled"}),
     NotImplementedError, "backend: cuda_tiled runs on cuda tensors, but q is on cpu"),
    ("not_an_array", lambda q, k, v: ((q.tolist(), k, v), {}), TypeError, "q: is a builtins.list"),
    ("mixed", lambda q, k, v: ((q, k, v.tolist()), {}), TypeError, "v: is a builtins.list"),
]


@pytest.mark.parametrize("break_call,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(break_call, error, words):
    args, kwargs = break_call(*valid_qkv())
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        flashattn.attention(*args, **kwargs)


def test_library_errors_carry_the_status():
    q, k, v = valid_qkv()
    with pytest.raises(flashattn.InvalidArgumentError) as invalid:
        flashattn.attention(q, k[..., :4], v)
    assert invalid.value.status == 1 and isinstance(invalid.value, flashattn.Error)
    with pytest.raises(flashattn.UnsupportedError) as unsupported:
        flashattn.attention(q, k, v, backend="cuda_naive")
    assert unsupported.value.status == 2 and isinstance(unsupported.value, RuntimeError)


def test_library_path_from_environment(monkeypatch, tmp_path):
    library = tmp_path / "libflashattn.so"
    library.write_bytes(b"")
    monkeypatch.setenv("FLASHATTN_LIBRARY", str(library))
    assert _library.library_path() == library
    monkeypatch.setenv("FLASHATTN_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="FLASHATTN_LIBRARY=.*missing.so is not a file"):
        _library.library_path()


def test_library_path_without_environment_or_package(monkeypatch, tmp_path):
    monkeypatch.delenv("FLASHATTN_LIBRARY", raising=False)
    monkeypatch.setattr(_library, "PACKAGED", tmp_path / "libflashattn.so")
    with pytest.raises(FileNotFoundError, match="pip install ."):
        _library.library_path()


@pytest.mark.parametrize("fresh", [True, False], ids=["allocated", "sliced"])
@pytest.mark.parametrize("backend", [None, "cpu", "reference"])
@pytest.mark.parametrize("batch,seqlen_q,seqlen_k", EMPTY_SIZES, ids=EMPTY_IDS)
def test_empty_problems(batch, seqlen_q, seqlen_k, backend, fresh):
    """No elements anywhere is legal: NumPy gives fresh empty arrays strides of 0, slices
    keep their parent's. seqlen_k 0: every row sees no key, so out 0 and lse -inf."""
    if fresh:
        q, k, v = edge_cases.qkv(batch, seqlen_q, seqlen_k)
    else:
        q, k, v = (a[:batch, :s] for a, s in zip(edge_cases.qkv(3, 7, 7),
                                                 (seqlen_q, seqlen_k, seqlen_k)))
    for causal in (False, True):
        out, lse = flashattn.attention(q, k, v, causal=causal, return_lse=True, backend=backend)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert lse.shape == (batch, 4, seqlen_q) and lse.dtype == np.float32
        assert np.all(out == 0) and np.all(np.isneginf(lse))
        expected, expected_lse = reference_attention(q, k, v, causal=causal)
        edge_cases.assert_matches(out, lse, expected, expected_lse)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("case", list(edge_cases.NON_FINITE))
def test_non_finite_values_propagate_as_in_standard_attention(case, backend):
    (q, k, v), options, nan = edge_cases.NON_FINITE[case]()
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    np.testing.assert_array_equal(np.isnan(out), nan)
    expected, expected_lse = reference_attention(q, k, v, **options)
    np.testing.assert_array_equal(np.isnan(expected), nan)  # the oracle agrees with the rule
    edge_cases.assert_matches(out, lse, expected, expected_lse)
    edge_cases.assert_matches(out, lse, *flashattn.attention(q, k, v, return_lse=True,
                                                             backend="reference", **options))
