"""flashattn.attention_with_kvcache on PyTorch CUDA tensors: every GPU backend (and the
automatic choice) in every dtype it takes, contiguous and paged caches (page sizes 1, 3, 16
in a random order; 16 and 256 on long caches), appended keys, seqlen_q 1 and above, GQA,
split-KV counts, against the float64 reference per sequence (16-bit: at most twice the error
of the plain formula in that dtype); unchecked calls (no host wait) equal checked ones, are
captured in a CUDA graph and give NaN rows for a sequence out of range; torch.compile; the
device rules. Skipped without torch or a CUDA GPU; a backend the library says cannot run a
KV cache (or this one) is skipped with the library's reason, which pytest -rs lists."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, rel_l2  # noqa: E402
from kvcache_cases import (CASE_IDS, CASES, case_options,  # noqa: E402
                           expected_caches, gathered, make_problem, reference,
                           reference_options)
from torch_cases import (as_float64, gpu_backends, pair_id, plain_attention,  # noqa: E402
                         skip_unless_runs, unless_unsupported)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
PAIRS = gpu_backends()


def rounded(problem, dtype):
    """The problem with its floats rounded to dtype, so the reference sees the call's
    inputs."""
    problem = problem.copy()
    for name in ("q", "k_cache", "v_cache", "k_new", "v_new"):
        value = getattr(problem, name)
        if value is not None:
            setattr(problem, name, torch.from_numpy(value).to(dtype).float().numpy())
    return problem


def on_gpu(problem, dtype):
    """The problem's arrays as CUDA tensors: floats in dtype, int32 as they are."""
    def convert(x):
        if x is None:
            return None
        t = torch.from_numpy(np.ascontiguousarray(x)).cuda()
        return t if x.dtype == np.int32 else t.to(dtype)
    return {name: convert(value) for name, value in vars(problem).items()}


NAMES = ("q", "k_cache", "v_cache", "k_new", "v_new", "cache_seqlens", "block_table")


def call(t, **options):
    return flashattn.attention_with_kvcache(*(t[n] for n in NAMES), return_softmax_lse=True,
                                            **options)


def plain_per_sequence(problem, dtype, options):
    """(out,) of the plain formula in `dtype` (torch, on the GPU) on each sequence's keys
    gathered from the cache after appending: the error a plain implementation in that dtype
    makes."""
    k_cache, v_cache = expected_caches(problem)
    options = reference_options(options)
    outs = []
    for b in range(problem.q.shape[0]):
        q, k, v = (torch.from_numpy(np.ascontiguousarray(x)).cuda().to(dtype)[None]
                   for x in (problem.q[b], gathered(problem, k_cache, b),
                             gathered(problem, v_cache, b)))
        outs.append(plain_attention(q, k, v, **options))
    return torch.cat(outs)


def assert_accurate(out, lse, problem, dtype, options):
    """out within 1e-5 of the float64 reference in fp32; 16-bit: at most twice the plain
    formula's error in that dtype plus a quarter ulp. lse within 1e-4 (fp32) or 1e-3."""
    numpy_options = {n: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v)
                     for n, v in options.items()}
    expected_out, expected_lse = reference(problem, **numpy_options)
    err = rel_l2(as_float64(out), expected_out)
    if dtype == torch.float32:
        assert err <= 1e-5
    else:
        plain = plain_per_sequence(problem, dtype, options)
        assert err <= 2 * rel_l2(as_float64(plain), expected_out) + torch.finfo(dtype).eps / 4
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4 if dtype == torch.float32
                     else 1e-3)


def check_call(problem, dtype, backend, options):
    problem = rounded(problem, dtype)
    t = on_gpu(problem, dtype)
    options = case_options(options, problem.q.shape[2], lambda s: torch.from_numpy(s).cuda())
    out, lse = unless_unsupported(lambda: call(t, backend=backend, **options))
    assert out.dtype == dtype and out.shape == t["q"].shape and out.is_contiguous()
    assert lse.device == out.device == t["q"].device
    assert_accurate(out, lse, problem, dtype, options)
    for name, want in zip(("k_cache", "v_cache"), expected_caches(problem)):
        np.testing.assert_array_equal(t[name].float().cpu().numpy(), want)
    return t, out, lse


# Every GPU backend through the binding, on a contiguous and a paged cache (the kernels'
# own suite, test_kv_cache, covers page sizes and lengths exhaustively).
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("shape", [(1, 1), (4, 2)], ids=lambda s: f"q{s[0]}-new{s[1]}")
@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_forward(pair, page_size, shape, case):
    backend, dtype = pair
    skip_unless_runs(backend, 64)
    seqlen_q, seqlen_new = shape
    problem = make_problem(seqlen_q=seqlen_q, seqlen_new=seqlen_new, page_size=page_size,
                           heads=(8, 2), head_dim=64, capacity=50, seed=seqlen_q)
    check_call(problem, DTYPES[dtype], backend, case[1])


# Long caches: several key blocks and split-KV, GQA groups up to 8, head dims 64 to 256,
# pages of 16 and 256 keys; lengths 0, 1, a few thousand and the capacity.
LONG = [
    ("d128_g4_q1", dict(heads=(32, 8), head_dim=128, seqlen_q=1, seqlen_new=1)),
    ("d128_g8_q4", dict(heads=(32, 4), head_dim=128, seqlen_q=4, seqlen_new=4)),
    ("d64_g1_q1", dict(heads=(8, 8), head_dim=64, seqlen_q=1, seqlen_new=1)),
    ("d256_g2_q2", dict(heads=(4, 2), head_dim=256, seqlen_q=2, seqlen_new=0)),
    ("d80_g16_q8", dict(heads=(16, 1), head_dim=80, seqlen_q=8, seqlen_new=8)),
]


@pytest.mark.parametrize("num_splits", [0, 1, 7])
@pytest.mark.parametrize("page_size", [None, 16, 256], ids=["contiguous", "paged16",
                                                             "paged256"])
@pytest.mark.parametrize("long", LONG, ids=[case[0] for case in LONG])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_long_caches_on_the_automatic_backend(dtype, long, page_size, num_splits):
    _, shape = long
    capacity = 3000
    cached = [0, 1, 2500, capacity - shape["seqlen_new"], 700]
    problem = make_problem(cached=cached, page_size=page_size, capacity=capacity, seed=7,
                           **shape)
    check_call(problem, DTYPES[dtype], None, dict(causal=True, num_splits=num_splits))


def test_fp32_long_caches():
    for page_size in (None, 64):
        problem = make_problem(cached=[1500, 0, 3], seqlen_q=2, seqlen_new=1, heads=(8, 2),
                               head_dim=96, page_size=page_size, capacity=1600, seed=2)
        check_call(problem, torch.float32, None, dict(causal=True, window_size=(300, 0)))


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
def test_head_dim_beyond_the_decode_kernel(page_size):
    """16-bit head_dim between the decode kernel's 256 and cuda_mma's 512: whichever kernel
    the library picks must read the cache by its layout."""
    problem = make_problem(cached=[40, 0, 100], seqlen_q=1, seqlen_new=1, heads=(4, 2),
                           head_dim=320, page_size=page_size, capacity=128, seed=4)
    check_call(problem, torch.bfloat16, None, dict(causal=True))


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_unchecked_equals_checked(dtype, page_size):
    """Bit for bit: the longest sequence fills the cache, so the split count (which an
    unchecked call chooses from the capacity) is the same."""
    problem = rounded(make_problem(cached=[900, 0, 31, 1023], seqlen_q=2, seqlen_new=1,
                                   heads=(16, 4), head_dim=128, page_size=page_size,
                                   capacity=1024, seed=3), DTYPES[dtype])
    checked, unchecked = on_gpu(problem, DTYPES[dtype]), on_gpu(problem, DTYPES[dtype])
    want = call(checked, causal=True)
    got = call(unchecked, causal=True, checked=False)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(unchecked[name], checked[name], rtol=0, atol=0)


@pytest.mark.parametrize("bad", ["length", "page"])
def test_unchecked_out_of_range_gives_that_sequence_nan(bad):
    """Unchecked, a sequence whose length passes the capacity or whose page is out of range
    gets NaN rows and lse and appends nothing; the others are unaffected."""
    problem = rounded(make_problem(cached=[10, 20, 30], seqlen_q=1, seqlen_new=1,
                                   heads=(8, 2), head_dim=64, page_size=16, capacity=64),
                      torch.bfloat16)
    good = on_gpu(problem, torch.bfloat16)
    want_out, want_lse = call(good, causal=True)
    t = on_gpu(problem, torch.bfloat16)
    if bad == "length":
        t["cache_seqlens"][1] = problem.capacity
    else:
        t["block_table"][1, 1] = problem.k_cache.shape[0] + 100
    before = [t[n].clone() for n in ("k_cache", "v_cache")]
    out, lse = call(t, causal=True, checked=False)
    assert out[1].isnan().all() and lse[1].isnan().all()
    for b in (0, 2):  # (the split count may differ: unchecked, it follows the capacity)
        torch.testing.assert_close(out[b], want_out[b])
        torch.testing.assert_close(lse[b], want_lse[b], rtol=1e-5, atol=1e-5)
    # Sequence 1's new key is not written anywhere: the caches differ from before only in
    # the rows the other sequences appended.
    for name, old in zip(("k_cache", "v_cache"), before):
        changed = (t[name] != old).any(dim=(2, 3)).nonzero().tolist()
        allowed = [list(problem.block_table[b, c // 16:c // 16 + 1].tolist()) + [c % 16]
                   for b, c in ((0, 10), (2, 30))]
        assert all(row in allowed for row in changed)


def test_cuda_graph_replay_equals_eager():
    """An unchecked decoding step captured once and replayed as the lengths advance (the
    lengths, q, k and v updated in place between replays), against eager calls on a copy of
    the cache."""
    problem = rounded(make_problem(cached=[100, 0, 511, 37], seqlen_q=1, seqlen_new=1,
                                   heads=(32, 8), head_dim=128, page_size=64, capacity=640,
                                   seed=11), torch.bfloat16)
    graph_inputs, eager_inputs = on_gpu(problem, torch.bfloat16), on_gpu(problem, torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as CUDA graphs want
        call(graph_inputs, causal=True, checked=False)
    torch.cuda.current_stream().wait_stream(side)
    call(eager_inputs, causal=True, checked=False)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = call(graph_inputs, causal=True, checked=False)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        for name in ("q", "k_new", "v_new"):
            fresh = torch.randn(graph_inputs[name].shape, generator=generator, device="cuda")
            graph_inputs[name].copy_(fresh)
            eager_inputs[name].copy_(fresh)
        graph_inputs["cache_seqlens"].add_(1)
        eager_inputs["cache_seqlens"].add_(1)
        graph.replay()
        want_out, want_lse = call(eager_inputs, causal=True, checked=False)
        torch.testing.assert_close(static_out, want_out, rtol=0, atol=0)
        torch.testing.assert_close(static_lse, want_lse, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(graph_inputs[name], eager_inputs[name], rtol=0, atol=0)


def test_torch_compile_fullgraph():
    problem = make_problem(cached=[300, 5, 0], seqlen_q=1, seqlen_new=1, heads=(8, 2),
                           head_dim=64, page_size=16, capacity=320)
    compiled_inputs, eager_inputs = (on_gpu(problem, torch.bfloat16) for _ in range(2))

    def step(q, k_cache, v_cache, k, v, lengths, table):
        return flashattn.attention_with_kvcache(q, k_cache, v_cache, k, v, lengths, table,
                                                causal=True, checked=False) * 2
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(step, fullgraph=True)(*(compiled_inputs[n] for n in NAMES))
        want = step(*(eager_inputs[n] for n in NAMES))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for name in ("k_cache", "v_cache"):
        torch.testing.assert_close(compiled_inputs[name], eager_inputs[name], rtol=0, atol=0)


def test_checked_errors_and_device_rules():
    problem = make_problem(seqlen_new=1, page_size=3)
    t = on_gpu(problem, torch.float16)
    t["cache_seqlens"][2] = problem.capacity
    with pytest.raises(flashattn.InvalidArgumentError, match="kv_cache.seqlens: entry 2"):
        call(t)
    t = on_gpu(problem, torch.float16)
    t["block_table"][0, 0] = problem.k_cache.shape[0]
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"kv_cache.block_table: entry \(0, 0\)"):
        call(t)
    t = on_gpu(problem, torch.float16)
    t["cache_seqlens"] = t["cache_seqlens"].cpu()
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="cache_seqlens: device is cpu, must be q's device"):
        call(t)
    t = on_gpu(problem, torch.float16)
    t["block_table"] = t["block_table"].cpu()
    with pytest.raises(flashattn.InvalidArgumentError,
                       match="block_table: device is cpu, must be q's device"):
        call(t)
    t = on_gpu(problem, torch.float32)
    with pytest.raises(flashattn.UnsupportedError, match="kv_cache.checked"):
        call(t, checked=False)
