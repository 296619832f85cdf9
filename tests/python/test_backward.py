"""flashattn.attention_backward on NumPy arrays (the CPU backends) against the float64
oracle, which is itself checked by finite differences: awkward shapes, masks, rows without
keys, strided views, float16, empty problems and the errors. torch is not needed."""
import numpy as np
import pytest

import flashattn
from attention_reference import plain_attention_backward, reference_attention, rel_l2
from edge_cases import EMPTY_IDS, EMPTY_SIZES

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim): seqlen 1, 17 and 100, head_dim
# 1, 3 and 80, seqlen_q ≠ seqlen_k both ways, grouped-query attention (2 and 3 query heads
# per kv head).
SHAPES = [(1, 1, 1, 1, 1, 1), (2, 17, 17, 4, 2, 3), (1, 100, 37, 2, 2, 80),
          (2, 17, 100, 3, 1, 16), (1, 37, 100, 6, 2, 8)]
SHAPE_IDS = ["b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*s) for s in SHAPES]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
FP32_TOLERANCE = 1e-5  # relative L2 error of each gradient against the float64 oracle


def problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0):
    """q, k, v and dout, standard normal, in `dtype`."""
    rng = np.random.default_rng(seed)

    def draw(seqlen, heads):
        return rng.standard_normal((batch, seqlen, heads, head_dim)).astype(dtype)
    return (draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv),
            draw(seqlen_q, heads_q))


def flashattn_grads(q, k, v, dout, backend=None, **options):
    """The library's forward, then its backward on that forward's out and lse."""
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend, **options)


def test_oracle_matches_finite_differences():
    """The float64 oracle's gradients are the derivatives of the float64 reference forward:
    a directional derivative of loss = Σ out·dout, by central differences."""
    q, k, v, dout = problem(1, 5, 7, 4, 2, 3, dtype=np.float64, seed=1)
    options = {"causal": True, "causal_alignment": "bottom_right", "scale": 0.7}
    _, dq, dk, dv = plain_attention_backward(q, k, v, dout, **options)
    rng = np.random.default_rng(2)
    directions = [rng.standard_normal(x.shape) for x in (q, k, v)]

    def loss(step):
        moved = [x + step * d for x, d in zip((q, k, v), directions)]
        return np.sum(reference_attention(*moved, **options)[0] * dout)
    eps = 1e-5
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    analytic = sum(np.sum(g * d) for g, d in zip((dq, dk, dv), directions))
    assert abs(numeric - analytic) <= 1e-7 * max(1.0, abs(analytic))


def test_float32_gradients_match_finite_differences_of_the_library():
    """The library's own float32 forward (reference backend) differentiated numerically
    agrees with its backward: Σ grad·direction against a central difference."""
    q, k, v, dout = problem(1, 6, 9, 2, 1, 4, seed=3)
    rng = np.random.default_rng(4)
    directions = [rng.standard_normal(x.shape).astype(np.float32) for x in (q, k, v)]
    dq, dk, dv = flashattn_grads(q, k, v, dout, backend="reference", causal=True)

    def loss(step):
        moved = [(x + step * d).astype(np.float32) for x, d in zip((q, k, v), directions)]
        out = flashattn.attention(*moved, causal=True, backend="reference")
        return np.sum(out.astype(np.float64) * dout)
    eps = 1e-2
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    analytic = sum(np.sum(g.astype(np.float64) * d) for g, d in zip((dq, dk, dv), directions))
    assert abs(numeric - analytic) <= 1e-3 * max(1.0, abs(analytic))


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_gradients_match_the_oracle(shape, mask, backend):
    q, k, v, dout = problem(*shape, seed=sum(shape))
    grads = flashattn_grads(q, k, v, dout, backend=backend, **MASKS[mask])
    _, *expected = plain_attention_backward(q, k, v, dout, **MASKS[mask])
    for name, grad, x, want in zip("qkv", grads, (q, k, v), expected):
        assert grad.shape == x.shape and grad.dtype == np.float32, name
        assert grad.flags.c_contiguous, name
        assert rel_l2(grad, want) <= FP32_TOLERANCE, name


@pytest.mark.parametrize("scale", [0.3, -1.25, 0.0])
def test_explicit_scale(scale):
    q, k, v, dout = problem(2, 9, 11, 2, 1, 16, seed=5)
    grads = flashattn_grads(q, k, v, dout, causal=True, scale=scale)
    _, *expected = plain_attention_backward(q, k, v, dout, causal=True, scale=scale)
    for grad, want in zip(grads, expected):
        assert rel_l2(grad, want) <= FP32_TOLERANCE


def test_rows_without_keys_get_dq_zero_and_unseen_keys_dk_dv_zero():
    # bottom_right with seqlen_q > seqlen_k: rows 0..5 see no key (row 6 sees one, so its
    # dq is 0 too: a softmax over one key has no gradient). top_left with seqlen_k >
    # seqlen_q: keys from seqlen_q on are seen by no row.
    q, k, v, dout = problem(1, 10, 4, 2, 2, 8, seed=6)
    dq, dk, dv = flashattn_grads(q, k, v, dout, causal=True, causal_alignment="bottom_right")
    assert np.all(dq[:, :6] == 0) and np.all(dq[:, 7:] != 0)
    q, k, v, dout = problem(1, 4, 10, 2, 2, 8, seed=7)
    dq, dk, dv = flashattn_grads(q, k, v, dout, causal=True)
    assert np.all(dk[:, 4:] == 0) and np.all(dv[:, 4:] == 0) and np.all(dv[:, :4] != 0)


@pytest.mark.parametrize("batch,seqlen_q,seqlen_k", EMPTY_SIZES, ids=EMPTY_IDS)
def test_empty_problems(batch, seqlen_q, seqlen_k):
    """No keys: dq 0; no queries: dk and dv 0; the shapes of q, k and v either way."""
    q, k, v, dout = problem(batch, seqlen_q, seqlen_k, 4, 2, 8, seed=8)
    for causal in (False, True):
        dq, dk, dv = flashattn_grads(q, k, v, dout, causal=causal)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
        assert not (dq.any() or dk.any() or dv.any())


def test_strided_views_give_the_same_gradients():
    """Views of packed projections, a transposed out and dout, a strided lse: read in place
    or copied once, the gradients are those of contiguous arrays, bit for bit."""
    rng = np.random.default_rng(9)
    packed = rng.standard_normal((2, 21, 3, 4, 24)).astype(np.float32)[..., :16]
    q, k, v = (packed[:, :, i] for i in range(3))
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    contiguous = flashattn.attention_backward(*(np.ascontiguousarray(x) for x in (q, k, v)),
                                              out, dout, lse, causal=True)
    out_t = np.ascontiguousarray(out.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    dout_t = np.asfortranarray(dout)  # head_dim not contiguous: copied
    lse_t = np.ascontiguousarray(lse.transpose(0, 2, 1)).transpose(0, 2, 1)
    strided = flashattn.attention_backward(q, k, v, out_t, dout_t, lse_t, causal=True)
    for a, b in zip(strided, contiguous):
        np.testing.assert_array_equal(a, b)


def test_float16_is_as_accurate_as_float16_arithmetic():
    """float16 gradients within twice the error of the plain computation done in float16
    (against the float64 oracle on the same rounded inputs), plus a quarter ulp."""
    q, k, v, dout = problem(1, 33, 47, 4, 2, 32, dtype=np.float16, seed=10)
    grads = flashattn_grads(q, k, v, dout, causal=True)
    _, *expected = plain_attention_backward(q, k, v, dout, causal=True)
    _, *in_f16 = plain_attention_backward(q, k, v, dout, causal=True, dtype=np.float16)
    floor = np.finfo(np.float16).eps / 4
    for grad, want, plain in zip(grads, expected, in_f16):
        assert grad.dtype == np.float16
        assert rel_l2(grad, want) <= 2 * rel_l2(plain, want) + floor


def test_deterministic_gradients_are_bit_identical():
    q, k, v, dout = problem(2, 40, 50, 4, 2, 16, seed=11)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    first = flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True)
    again = flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_backends_report_their_backward():
    table = {b.name: b for b in flashattn.backends()}
    for name in ("reference", "cpu"):
        assert table[name].has_backward and table[name].backward_max_head_dim is None
    assert not table["cuda_naive"].has_backward
    for b in table.values():
        assert b.has_backward or b.backward_max_head_dim is None


def arrays():
    q, k, v, dout = problem(1, 5, 6, 4, 2, 8, seed=12)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    return q, k, v, out, dout, lse


def _replace(index, value):
    def call(q, k, v, out, dout, lse):
        args = [q, k, v, out, dout, lse]
        args[index] = value(args[index])
        return flashattn.attention_backward(*args)
    return call


ERRORS = [
    ("lse_shape", _replace(5, lambda lse: lse[:, :, :-1]), ValueError, r"lse: has shape"),
    ("lse_dtype", _replace(5, lambda lse: lse.astype(np.float64)), ValueError,
     "lse: dtype is float64, must be float32"),
    ("lse_type", _replace(5, lambda lse: lse.tolist()), TypeError, "lse: is a builtins.list"),
    ("dout_shape", _replace(4, lambda dout: dout[:, :-1]), ValueError, "dout: seqlen is 4"),
    ("out_dtype", _replace(3, lambda out: out.astype(np.float16)), ValueError,
     "out: dtype f16 differs from q's dtype f32"),
    ("dout_type", _replace(4, lambda dout: 1.0), TypeError, "dout: is a builtins.float"),
    ("k_heads", lambda q, k, v, out, dout, lse: flashattn.attention_backward(
        q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2), out, dout, lse),
     ValueError, r"q: heads \(4\) must be a multiple of k's heads \(3\)"),
    ("cuda_backend", lambda *a: flashattn.attention_backward(*a, backend="cuda_tiled"),
     NotImplementedError, "backend: cuda_tiled runs on cuda tensors"),
    ("deterministic", lambda *a: flashattn.attention_backward(*a, deterministic=1), TypeError,
     "deterministic: is a int, must be a bool"),
    ("scale", lambda *a: flashattn.attention_backward(*a, scale=float("nan")), ValueError,
     "scale: is nan, must be finite"),
    ("alignment", lambda *a: flashattn.attention_backward(*a, causal=True,
                                                          causal_alignment="left"),
     ValueError, "causal_alignment: is 'left'"),
]


@pytest.mark.parametrize("call,error,words", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call(*arrays())
