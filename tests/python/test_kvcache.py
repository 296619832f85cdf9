"""flashattn.attention_with_kvcache on NumPy arrays, on the CPU backends: contiguous and paged
caches (page sizes 1, 3, 16 in a random page order) against the float64 reference computed per
sequence on the keys gathered from the cache; appended keys and values and the cache left
behind; lengths 0 and at the capacity; seqlen_q 1 and above; grouped-query heads; the
variants; which backend "auto" runs; the arguments' errors. test_torch_kvcache.py and
test_torch_cuda_kvcache.py cover PyTorch."""
import numpy as np
import pytest

import flashattn
from attention_reference import assert_lse_close, rel_l2
from kvcache_cases import (CASE_IDS, CASES, LAYOUT_IDS, LAYOUTS, case_options,
                           expected_caches, make_problem, reference)

FP32_TOLERANCE = 1e-5


def call(problem, **options):
    """attention_with_kvcache on the problem's arrays (the cache modified in place), with
    return_softmax_lse."""
    return flashattn.attention_with_kvcache(
        problem.q, problem.k_cache, problem.v_cache, problem.k_new, problem.v_new,
        problem.cache_seqlens, problem.block_table, return_softmax_lse=True, **options)


# The CPU backends, both of which take either layout, and the automatic choice.
BACKENDS = ["auto", "reference", "cpu"]


def check_call(problem, backend, options, tolerance=FP32_TOLERANCE, lse_tolerance=1e-4):
    expected_out, expected_lse = reference(problem, **options)
    expected_k, expected_v = expected_caches(problem)
    out, lse = call(problem, backend=backend, **options)
    assert out.shape == problem.q.shape and out.dtype == problem.q.dtype
    assert out.flags.c_contiguous
    batch, seqlen_q, heads_q, _ = problem.q.shape
    assert lse.shape == (batch, heads_q, seqlen_q) and lse.dtype == np.float32
    assert rel_l2(out, expected_out) <= tolerance
    assert_lse_close(lse, expected_lse, tol=lse_tolerance)
    # The appended rows are written, and nothing else in the cache changes.
    np.testing.assert_array_equal(problem.k_cache, expected_k)
    np.testing.assert_array_equal(problem.v_cache, expected_v)
    return out, lse


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("seqlen_new", [0, 2], ids=["read", "append2"])
@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize("page_size", LAYOUTS, ids=LAYOUT_IDS)
def test_matches_the_reference(page_size, seqlen_q, seqlen_new, case):
    _, options = case
    for backend in BACKENDS:
        problem = make_problem(seqlen_q=seqlen_q, seqlen_new=seqlen_new, page_size=page_size,
                               seed=seqlen_q + 10 * seqlen_new)
        check_call(problem, backend, case_options(options, problem.q.shape[2]))


@pytest.mark.parametrize("heads", [(2, 2), (6, 2), (8, 1)], ids=["mha", "gqa3", "mqa8"])
@pytest.mark.parametrize("page_size", [None, 3], ids=["contiguous", "paged3"])
def test_grouped_query_heads(page_size, heads):
    for backend in BACKENDS:
        problem = make_problem(seqlen_q=2, seqlen_new=1, heads=heads, page_size=page_size,
                               head_dim=8, seed=heads[0])
        check_call(problem, backend, dict(causal=True))


@pytest.mark.parametrize("page_size", LAYOUTS, ids=LAYOUT_IDS)
def test_automatic_backend_is_cpu(page_size):
    """On the host "auto" runs cpu on a contiguous cache and on a paged one: the same bits
    as naming it."""
    problem = make_problem(seqlen_q=2, seqlen_new=1, page_size=page_size, seed=3)
    auto = call(problem.copy(), backend="auto", causal=True)
    named = call(problem.copy(), backend="cpu", causal=True)
    for a, b in zip(auto, named):
        np.testing.assert_array_equal(a, b)


def test_queries_past_the_keys_and_empty_sequences():
    """A sequence of no keys gets 0 and lse -inf in every row; with seqlen_q above a
    sequence's length, causal (bottom-right) leaves its first rows without keys."""
    problem = make_problem(seqlen_q=4, cached=[0, 2, 3, 4], page_size=3)
    out, lse = check_call(problem, "reference", dict(causal=True))
    assert not out[0].any() and np.isneginf(lse[0]).all()
    for b, length in ((1, 2), (2, 3), (3, 4)):
        empty = 4 - length  # rows i with i + length - 4 < 0
        assert not out[b, :empty].any() and np.isneginf(lse[b, :, :empty]).all()
        assert np.isfinite(lse[b, :, empty:]).all()


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
def test_lengths_as_an_int_and_full_caches(page_size):
    problem = make_problem(cached=[5, 5, 5], seqlen_new=2, page_size=page_size)
    as_array = call(problem.copy(), causal=True)
    as_int = flashattn.attention_with_kvcache(
        problem.q, problem.k_cache, problem.v_cache, problem.k_new, problem.v_new, 5,
        problem.block_table, causal=True, return_softmax_lse=True)
    for a, b in zip(as_array, as_int):
        np.testing.assert_array_equal(a, b)
    # None: every sequence's cache is full (nothing appended).
    full = make_problem(cached=[problem.capacity] * 3, page_size=page_size)
    expected = call(full.copy())
    got = flashattn.attention_with_kvcache(full.q, full.k_cache, full.v_cache,
                                           block_table=full.block_table,
                                           return_softmax_lse=True)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


def test_unused_block_table_entries_are_not_read():
    """Pages past a sequence's length may hold anything, even indices out of range."""
    problem = make_problem(cached=[1, 4, 0], seqlen_new=1, page_size=3, capacity=12)
    expected = reference(problem, causal=True)
    problem.block_table[0, 1:] = -5
    problem.block_table[2, 1:] = problem.k_cache.shape[0] + 7
    out, lse = call(problem, causal=True)
    assert rel_l2(out, expected[0]) <= FP32_TOLERANCE


def test_float16_and_strided_inputs():
    """A float16 cache; q, k and v views whose head_dim is strided are copied; the cache
    itself may be any view whose head_dim is contiguous (here every other sequence)."""
    problem = make_problem(seqlen_q=3, seqlen_new=2, dtype=np.float16, head_dim=8)
    wide = np.zeros((2 * problem.k_cache.shape[0], *problem.k_cache.shape[1:]), np.float16)
    wide[::2] = problem.k_cache
    problem.k_cache = wide[::2]
    strided_q = np.zeros((*problem.q.shape[:3], 2 * problem.q.shape[3]), np.float16)
    strided_q[..., ::2] = problem.q
    problem.q = strided_q[..., ::2]
    expected_k, _ = expected_caches(problem)
    expected_out, _ = reference(problem, causal=True)
    out, _ = call(problem, causal=True)
    assert out.dtype == np.float16
    assert rel_l2(out, expected_out) <= 2e-3
    np.testing.assert_array_equal(wide[::2], expected_k)
    assert not wide[1::2].any()


@pytest.mark.parametrize("num_splits", [0, 1, 3, 128])
def test_num_splits(num_splits):
    problem = make_problem(seqlen_q=2, seqlen_new=1)
    check_call(problem, "auto", dict(causal=True, num_splits=num_splits))


# Errors: the library's (lengths, pages, splits, backends) name its C fields and, in the
# note it gets, the argument each one is; the Python checks name the arguments.

def test_length_past_the_capacity():
    problem = make_problem(seqlen_new=2)
    problem.cache_seqlens[3] = problem.capacity - 1
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"kv_cache.seqlens: entry 3 is 19, .*with the 2 keys appended, at "
                             r"most the capacity \(20\).*kv_cache.seqlens is cache_seqlens"):
        call(problem)
    problem.cache_seqlens[3] = -1
    with pytest.raises(flashattn.InvalidArgumentError, match="kv_cache.seqlens: entry 3 is -1"):
        call(problem)


@pytest.mark.parametrize("bad", ["past", "negative"])
def test_page_out_of_range(bad):
    problem = make_problem(page_size=3)
    pages = problem.k_cache.shape[0]
    problem.block_table[2, 1] = pages if bad == "past" else -1
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=rf"kv_cache.block_table: entry \(2, 1\) is "
                             rf"{problem.block_table[2, 1]}, must name a page of k and v, in "
                             rf"\[0, {pages}\).*kv_cache.block_table is block_table"):
        call(problem)


def test_nothing_is_written_when_a_call_is_rejected():
    problem = make_problem(seqlen_new=2, page_size=3)
    problem.cache_seqlens[4] += 1
    before = problem.copy()
    with pytest.raises(flashattn.InvalidArgumentError, match="kv_cache.seqlens"):
        call(problem)
    np.testing.assert_array_equal(problem.k_cache, before.k_cache)
    np.testing.assert_array_equal(problem.v_cache, before.v_cache)


def test_library_errors_say_which_argument_they_name():
    problem = make_problem(seqlen_new=1)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"kv_cache.k_new: heads is 1, must equal k's heads \(2\) \[in "
                             r"attention_with_kvcache's arguments: kv_cache.k_new is k; k is "
                             r"k_cache\]"):
        flashattn.attention_with_kvcache(problem.q, problem.k_cache, problem.v_cache,
                                         problem.k_new[:, :, :1], problem.v_new[:, :, :1],
                                         problem.cache_seqlens)
    with pytest.raises(flashattn.InvalidArgumentError, match="kv_cache.key_splits: is 129"):
        call(problem, num_splits=129)


def test_unchecked_calls_are_for_cuda_mma():
    problem = make_problem()
    with pytest.raises(flashattn.UnsupportedError, match="kv_cache.checked"):
        call(problem, checked=False)


def test_python_checks():
    p = make_problem(seqlen_new=1, page_size=3)
    args = (p.q, p.k_cache, p.v_cache, p.k_new, p.v_new)
    run = flashattn.attention_with_kvcache
    with pytest.raises(flashattn.InvalidArgumentError, match="cache_seqlens: dtype is int64"):
        run(*args, p.cache_seqlens.astype(np.int64), p.block_table)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"cache_seqlens: has shape \(4,\), must be \(batch,\) = \(5,\)"):
        run(*args, p.cache_seqlens[:4], p.block_table)
    with pytest.raises(flashattn.InvalidArgumentError, match="block_table: dtype is int64"):
        run(*args, p.cache_seqlens, p.block_table.astype(np.int64))
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"block_table: has shape \(4, 7\), must be \(batch, "):
        run(*args, p.cache_seqlens, p.block_table[:4])
    with pytest.raises(flashattn.InvalidArgumentError, match="v: is None, but k is given"):
        run(p.q, p.k_cache, p.v_cache, p.k_new, None, p.cache_seqlens, p.block_table)
    with pytest.raises(flashattn.InvalidArgumentError, match="cache_seqlens: is None"):
        run(*args, None, p.block_table)
    with pytest.raises(TypeError, match="cache_seqlens: is a list"):
        run(*args, [1, 2, 3, 4, 5], p.block_table)
    with pytest.raises(TypeError, match="cache_seqlens: is a bool"):
        run(*args, True, p.block_table)
    with pytest.raises(TypeError, match="num_splits: is a float"):
        run(*args, p.cache_seqlens, p.block_table, num_splits=1.0)
    with pytest.raises(TypeError, match="checked: is a int"):
        run(*args, p.cache_seqlens, p.block_table, checked=1)
    with pytest.raises(TypeError, match="causal: is a int"):
        run(*args, p.cache_seqlens, p.block_table, causal=1)
    with pytest.raises(TypeError, match="k_cache: is a list"):
        run(p.q, [], p.v_cache, p.k_new, p.v_new, p.cache_seqlens, p.block_table)
    with pytest.raises(flashattn.InvalidArgumentError, match="backend: is 'fast'"):
        run(*args, p.cache_seqlens, p.block_table, backend="fast")


def test_a_read_only_cache_is_read_but_not_appended_to():
    problem = make_problem(seqlen_new=1)
    expected = call(problem.copy())
    for cache in (problem.k_cache, problem.v_cache):
        cache.flags.writeable = False
    with pytest.raises(flashattn.InvalidArgumentError, match="k_cache: is read-only"):
        call(problem)
    read = make_problem(seqlen_new=1)
    k_cache, v_cache = expected_caches(read)
    k_cache.flags.writeable = v_cache.flags.writeable = False
    out = flashattn.attention_with_kvcache(read.q, k_cache, v_cache,
                                           cache_seqlens=read.cache_seqlens + 1)
    np.testing.assert_array_equal(out, expected[0])


def test_a_library_without_kv_caches_is_refused():
    """A build from before KV caches would ignore the options' kv_cache: the package tells
    it apart by the backend table's fields it leaves alone."""
    from flashattn import _abi, _library
    from older_library import OlderLibrary

    old = OlderLibrary(_library.library(), "takes_kv_cache",
                       ("flashattn_forward", "flashattn_forward_with", "flashattn_last_error",
                        "flashattn_backend_count", "flashattn_forward_variants"))
    assert _library.knows_kv_cache(_library.library())
    assert not _library.knows_kv_cache(old)
    problem = make_problem()
    view = _abi.view(problem.q.ctypes.data, _abi.F32, problem.q.shape, (0, 0, 0, 1), _abi.CPU)
    with pytest.raises(flashattn.UnsupportedError, match="has no KV caches"):
        _library.forward(view, view, view, view, lib=old,
                         kv_cache=(problem.cache_seqlens.ctypes.data, _abi.NO_TENSOR,
                                   _abi.NO_TENSOR, 0, 0, 1, 0))


def test_empty_batches_and_no_queries():
    """batch 0 runs nothing; seqlen_q 0 still appends k and v (the cache is written before
    any row attends)."""
    q = np.zeros((0, 1, 4, 16), np.float32)
    pages = np.zeros((3, 4, 2, 16), np.float32)
    out = flashattn.attention_with_kvcache(q, pages, pages.copy(),
                                           cache_seqlens=np.zeros(0, np.int32),
                                           block_table=np.zeros((0, 2), np.int32))
    assert out.shape == q.shape
    problem = make_problem(seqlen_q=0, seqlen_new=2, page_size=3)
    out, lse = check_call(problem, "auto", {})
    assert out.shape == (5, 0, 4, 16) and lse.shape == (5, 4, 0)
