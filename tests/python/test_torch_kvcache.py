"""flashattn.attention_with_kvcache on PyTorch CPU tensors: the reference cases in float32
and bf16, the cache written in place, the two custom ops (opcheck, torch.compile with
fullgraph=True, mutation of the cache through a compiled call), inference only, and the
lengths' and block table's dtype rules. Skipped without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, rel_l2  # noqa: E402
from kvcache_cases import (CASE_IDS, CASES, LAYOUT_IDS, LAYOUTS, case_options,  # noqa: E402
                           expected_caches, make_problem, reference)
from torch_cases import compiled_keeping_graphs  # noqa: E402


def tensors(problem, dtype=torch.float32, device="cpu"):
    """The problem's arrays as torch tensors: floats in dtype, int32 as they are."""
    def convert(x):
        if x is None:
            return None
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t.to(device) if x.dtype == np.int32 else t.to(device=device, dtype=dtype)
    return {name: convert(value) for name, value in vars(problem).items()}


def call(t, **options):
    return flashattn.attention_with_kvcache(
        t["q"], t["k_cache"], t["v_cache"], t["k_new"], t["v_new"], t["cache_seqlens"],
        t["block_table"], return_softmax_lse=True, **options)


def rounded(problem, dtype):
    """The problem with its floats rounded to dtype (the reference then sees the inputs the
    call sees)."""
    problem = problem.copy()
    for name in ("q", "k_cache", "v_cache", "k_new", "v_new"):
        value = getattr(problem, name)
        if value is not None:
            setattr(problem, name,
                    torch.from_numpy(value).to(dtype).to(torch.float32).numpy())
    return problem


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("page_size", LAYOUTS, ids=LAYOUT_IDS)
def test_matches_the_reference(page_size, case, dtype):
    _, options = case
    problem = rounded(make_problem(seqlen_q=3, seqlen_new=2, page_size=page_size, seed=5),
                      dtype)
    t = tensors(problem, dtype)
    options = case_options(options, problem.q.shape[2], torch.from_numpy)
    expected_out, expected_lse = reference(
        problem, **{n: (v.numpy() if isinstance(v, torch.Tensor) else v)
                    for n, v in options.items()})
    out, lse = call(t, **options)
    assert out.dtype == dtype and out.shape == t["q"].shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (5, 4, 3)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_l2(out.float().numpy(), expected_out) <= tolerance
    assert_lse_close(lse.numpy(), expected_lse, tol=1e-4 if dtype == torch.float32 else 1e-2)
    for name, want in zip(("k_cache", "v_cache"), expected_caches(problem)):
        np.testing.assert_array_equal(t[name].float().numpy(), want)


def test_lengths_as_an_int():
    problem = make_problem(cached=[4, 4], seqlen_new=1, page_size=3)
    t, again = tensors(problem), tensors(problem)
    out = call(t)
    again["cache_seqlens"] = 4
    torch.testing.assert_close(call(again), out, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(again[name], t[name], rtol=0, atol=0)


def test_inference_only():
    t = tensors(make_problem(seqlen_new=1))
    t["q"].requires_grad_()
    with pytest.raises(flashattn.UnsupportedError,
                       match=r"q: requires grad, but attention_with_kvcache has no backward"):
        call(t)
    with torch.no_grad():
        out, _ = call(t)
    assert not out.requires_grad
    with torch.inference_mode():
        call(tensors(make_problem(seqlen_new=1)))


def test_lengths_and_block_table_rules():
    p = make_problem(seqlen_new=1, page_size=3)
    t = tensors(p)
    args = [t[n] for n in ("q", "k_cache", "v_cache", "k_new", "v_new")]
    run = flashattn.attention_with_kvcache
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="cache_seqlens: dtype is torch.int64, must be int32"):
        run(*args, t["cache_seqlens"].long(), t["block_table"])
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="block_table: dtype is torch.int64, must be int32"):
        run(*args, t["cache_seqlens"], t["block_table"].long())
    with pytest.raises(TypeError, match="block_table: is a numpy.ndarray; with torch inputs"):
        run(*args, t["cache_seqlens"], p.block_table)
    with pytest.raises(TypeError, match="cache_seqlens: is a float"):
        run(*args, 2.0, t["block_table"])
    with pytest.raises(flashattn.InvalidArgumentError, match="kv_cache.seqlens: entry 4"):
        run(*args, t["cache_seqlens"] + 1, t["block_table"])
    # Strided lengths and block tables are copied (they are small); the cache never is.
    expected = run(*args, t["cache_seqlens"], t["block_table"])
    lengths = torch.stack([t["cache_seqlens"]] * 2, dim=1)[:, 0]
    table = torch.stack([t["block_table"]] * 2, dim=2).flatten(1)[:, ::2]
    assert not lengths.is_contiguous() and not table.is_contiguous()
    torch.testing.assert_close(run(*args, lengths, table), expected, rtol=0, atol=0)


def test_opcheck():
    """Both custom ops: schemas (k_cache and v_cache mutated only by the appending one),
    fake implementations, autograd registration and AOT dispatch."""
    p = make_problem(seqlen_q=2, seqlen_new=1, page_size=3)
    t = tensors(p)
    options = (None, True, -1, -1, 0.0, None, 0, True, None)
    torch.library.opcheck(torch.ops.flashattn.kvcache_fwd.default,
                          (t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"],
                           t["block_table"], *options))
    torch.library.opcheck(torch.ops.flashattn.kvcache_append_fwd.default,
                          (t["q"], t["k_cache"], t["v_cache"], t["k_new"], t["v_new"],
                           t["cache_seqlens"], t["block_table"], *options))
    t = tensors(make_problem(seqlen_q=2))
    torch.library.opcheck(torch.ops.flashattn.kvcache_fwd.default,
                          (t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"], None, 0.5,
                           False, 3, 1, 2.0, torch.rand(4), 1, True, "reference"))


@pytest.mark.parametrize("append", [False, True], ids=["read", "append"])
@pytest.mark.parametrize("page_size", [None, 3], ids=["contiguous", "paged3"])
def test_torch_compile_fullgraph(page_size, append):
    """A compiled decoding step gives eager's output and leaves the cache as eager does,
    through the op that declares the mutation (or the one that has none)."""
    problem = make_problem(seqlen_q=2, seqlen_new=2 if append else 0, page_size=page_size)
    eager, compiled_inputs = tensors(problem), tensors(problem)

    def step(q, k_cache, v_cache, k, v, lengths, table):
        out = flashattn.attention_with_kvcache(q, k_cache, v_cache, k, v, lengths, table,
                                               causal=True)
        return out * 2
    compiled, graphs = compiled_keeping_graphs(step)
    names = ("q", "k_cache", "v_cache", "k_new", "v_new", "cache_seqlens", "block_table")
    with torch.no_grad():
        got = compiled(*(compiled_inputs[n] for n in names))
        want = step(*(eager[n] for n in names))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(compiled_inputs[name], eager[name], rtol=0, atol=0)
    op = "flashattn.kvcache_append_fwd" if append else "flashattn.kvcache_fwd"
    assert any(op in code for code in graphs)
    # Inductor too, with one length for every sequence as an int.
    torch._dynamo.reset()
    inductor_inputs, eager = tensors(problem), tensors(problem)

    def inputs(t):
        return [t[n] if n != "cache_seqlens" else 1 for n in names]
    with torch.no_grad():
        got = torch.compile(step, fullgraph=True)(*inputs(inductor_inputs))
        want = step(*inputs(eager))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(inductor_inputs[name], eager[name], rtol=0, atol=0)
