"""v's head_dim differing from q's and k's (head_dim_v: out, dout and dv take it) on NumPy
arrays, on the CPU backends: the forward and the backward against the float64 oracle
(pairs such as DeepSeek MLA prefill's 192 and 128, wider v, odd and tiny dims; GQA; both
causal alignments), the default scale (q's), variable-length batches, KV caches whose v_cache
and v_new have v's head_dim, the shape errors, and the backend table's flags (a library from
before them reads as taking none). test_torch_head_dim_v.py covers PyTorch,
test_torch_cuda_head_dim_v.py the GPU."""
import ctypes

import numpy as np
import pytest

import flashattn
from flashattn import _abi, _backends, _library
from attention_reference import (assert_lse_close, plain_attention_backward,
                                 reference_attention, rel_l2)
from kvcache_cases import expected_caches, make_problem, reference
from older_library import OlderLibrary
from varlen_cases import LENGTHS, packed_problem, per_sequence

# (head_dim, head_dim_v): MLA prefill's, a v wider than q and k, odd sizes, the smallest.
PAIRS = [(192, 128), (64, 128), (40, 24), (1, 3)]
PAIR_IDS = [f"d{d}_dv{dv}" for d, dv in PAIRS]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
BACKENDS = ["cpu", "reference"]
FP32_TOLERANCE = 1e-5


def problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v,
            dtype=np.float32, seed=0):
    """q, k (head_dim), v and dout (head_dim_v), standard normal, in `dtype`."""
    rng = np.random.default_rng(seed)

    def draw(seqlen, heads, dim):
        return rng.standard_normal((batch, seqlen, heads, dim)).astype(dtype)
    return (draw(seqlen_q, heads_q, head_dim), draw(seqlen_k, heads_kv, head_dim),
            draw(seqlen_k, heads_kv, head_dim_v), draw(seqlen_q, heads_q, head_dim_v))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_forward_and_backward_match_the_oracle(pair, mask, backend):
    """Query rows above and below the key count (both alignments leave rows without keys or
    keys without rows), 4 query heads on 2 kv heads."""
    for seqlen_q, seqlen_k in ((9, 14), (14, 9)):
        q, k, v, dout = problem(2, seqlen_q, seqlen_k, 4, 2, *pair, seed=sum(pair) + seqlen_q)
        options = MASKS[mask]
        out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
        expected, expected_lse = reference_attention(q, k, v, **options)
        assert out.shape == (2, seqlen_q, 4, pair[1]) and out.dtype == np.float32
        assert out.flags.c_contiguous
        assert rel_l2(out, expected) <= FP32_TOLERANCE
        assert_lse_close(lse, expected_lse, tol=1e-4)
        grads = flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                             **options)
        _, *expected_grads = plain_attention_backward(q, k, v, dout, **options)
        for name, grad, x, want in zip("qkv", grads, (q, k, v), expected_grads):
            assert grad.shape == x.shape and grad.dtype == np.float32, name
            assert rel_l2(grad, want) <= FP32_TOLERANCE, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16(backend):
    """fp16 inputs: within the tolerance of fp32 arithmetic on rounded inputs (the output's
    own rounding dominates)."""
    q, k, v, dout = problem(1, 17, 23, 4, 1, 40, 24, dtype=np.float16, seed=3)
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True, backend=backend)
    assert out.shape == (1, 17, 4, 24) and out.dtype == np.float16
    expected, _ = reference_attention(q, k, v, causal=True)
    assert rel_l2(out, expected) <= 1e-3
    grads = flashattn.attention_backward(q, k, v, out, dout, lse, causal=True,
                                         backend=backend)
    _, *wanted = plain_attention_backward(q, k, v, dout, causal=True)
    for grad, x, want in zip(grads, (q, k, v), wanted):
        assert grad.shape == x.shape and grad.dtype == np.float16
        assert rel_l2(grad, want) <= 3e-3


def test_the_default_scale_is_one_over_the_root_of_qs_head_dim():
    q, k, v, _ = problem(1, 6, 7, 2, 2, 16, 4, seed=4)
    np.testing.assert_array_equal(flashattn.attention(q, k, v),
                                  flashattn.attention(q, k, v, scale=0.25))


@pytest.mark.parametrize("backend", BACKENDS)
def test_variable_length_batches(backend):
    """Each sequence of a packed batch alone, forward and backward."""
    q, k, v, dout, cu_q, cu_k = packed_problem(LENGTHS, head_dim=40, head_dim_v=24, seed=5)
    options = dict(causal=True, causal_alignment="bottom_right")
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True,
                                          backend=backend, **options)
    assert out.shape == (q.shape[0], 4, 24)
    expected, expected_lse = per_sequence(reference_attention, cu_q, cu_k)(q, k, v, **options)
    assert rel_l2(out, expected) <= FP32_TOLERANCE
    assert_lse_close(lse, expected_lse, tol=1e-4)
    grads = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                backend=backend, **options)
    oracle = per_sequence(lambda *a, **o: plain_attention_backward(*a, **o)[1:], cu_q, cu_k)
    for grad, x, want in zip(grads, (q, k, v), oracle(q, k, v, dout, **options)):
        assert grad.shape == x.shape
        assert rel_l2(grad, want) <= FP32_TOLERANCE


@pytest.mark.parametrize("backend", ["auto"] + BACKENDS)
@pytest.mark.parametrize("page_size", [None, 3], ids=["contiguous", "paged3"])
@pytest.mark.parametrize("pair", [(40, 24), (8, 32)], ids=["d40_dv24", "d8_dv32"])
def test_kv_caches_hold_v_at_its_own_head_dim(pair, page_size, backend):
    """v_cache and the appended v have v's head_dim: the appended rows are written at it,
    and out has it."""
    head_dim, head_dim_v = pair
    p = make_problem(seqlen_q=2, seqlen_new=2, head_dim=head_dim, head_dim_v=head_dim_v,
                     page_size=page_size, seed=6)
    expected_out, expected_lse = reference(p, causal=True)
    expected_k, expected_v = expected_caches(p)
    out, lse = flashattn.attention_with_kvcache(p.q, p.k_cache, p.v_cache, p.k_new, p.v_new,
                                                p.cache_seqlens, p.block_table, causal=True,
                                                return_softmax_lse=True, backend=backend)
    assert out.shape == (*p.q.shape[:3], head_dim_v) and out.flags.c_contiguous
    assert rel_l2(out, expected_out) <= FP32_TOLERANCE
    assert_lse_close(lse, expected_lse, tol=1e-4)
    np.testing.assert_array_equal(p.k_cache, expected_k)
    np.testing.assert_array_equal(p.v_cache, expected_v)


def test_kv_cache_values_must_have_v_caches_head_dim():
    p = make_problem(seqlen_new=1, head_dim=16, head_dim_v=8)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"kv_cache.v_new: head_dim is 16, must equal v's head_dim \(8\)"
                             r".*v is v_cache"):
        flashattn.attention_with_kvcache(p.q, p.k_cache, p.v_cache, p.k_new, p.k_new,
                                         p.cache_seqlens)


def test_shape_errors_name_the_argument():
    q, k, v, dout = problem(1, 5, 6, 2, 1, 16, 8, seed=7)
    with pytest.raises(flashattn.InvalidArgumentError, match="k: head_dim is 8, must equal q's"):
        flashattn.attention(q, v, v)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    with pytest.raises(flashattn.InvalidArgumentError, match="dout: head_dim is 16"):
        flashattn.attention_backward(q, k, v, out, q, lse)
    with pytest.raises(flashattn.InvalidArgumentError, match="out: head_dim is 16"):
        flashattn.attention_backward(q, k, v, q, q, lse)


def test_the_backend_table_says_which_take_it():
    """Every row's flags are the library's; the CPU backends take v's head_dim forward and
    backward, and a backend without a backward takes none there."""
    lib = _library.library()
    for index, backend in enumerate(flashattn.backends()):
        info = _abi.BackendInfo(struct_size=ctypes.sizeof(_abi.BackendInfo))
        assert lib.flashattn_get_backend_info(index, ctypes.byref(info)) == _abi.OK
        assert backend.takes_head_dim_v is bool(info.takes_head_dim_v)
        assert backend.takes_backward_head_dim_v is bool(info.takes_backward_head_dim_v)
        assert backend.has_backward or not backend.takes_backward_head_dim_v
        if backend.device == "cpu":
            assert backend.takes_head_dim_v and backend.takes_backward_head_dim_v


def test_a_library_from_before_head_dim_v_takes_it_nowhere():
    # A build from before head_dim_v fills only the fields up to takes_backward_sequences.
    old = OlderLibrary(_library.library(), "takes_head_dim_v",
                       ("flashattn_forward", "flashattn_last_error", "flashattn_backend_count",
                        "flashattn_backward"))
    rows = _backends.table(old)
    assert rows and all(not b.takes_head_dim_v and not b.takes_backward_head_dim_v
                        for _, b in rows.values())
    assert any(b.has_backward for _, b in rows.values())  # the older fields still read
