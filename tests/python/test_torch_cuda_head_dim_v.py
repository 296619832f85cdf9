"""v's head_dim differing from q's and k's (head_dim_v) on PyTorch CUDA tensors: every GPU
backend whose table row takes it (flashattn.backends(): takes_head_dim_v,
takes_backward_head_dim_v), forward and backward, against the float64 plain formula; the
others refuse with a message naming v's head_dim; the automatic choice, packed batches and
KV caches. Skipped without torch or a CUDA GPU; test_torch_head_dim_v.py covers the CPU."""
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import rel_l2  # noqa: E402
from kvcache_cases import make_problem, reference  # noqa: E402
from torch_cases import (assert_as_accurate_as_plain, gpu_backends, pair_id,  # noqa: E402
                         plain_outputs, random_bshd, skip_unless_runs, unless_unsupported,
                         varlen_case)
from varlen_cases import CASES, per_sequence  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# (head_dim, head_dim_v): MLA prefill's, a v wider than q and k, sizes off the usual buckets.
PAIRS = [(192, 128), (64, 128), (40, 24)]
PAIR_IDS = [f"d{d}_dv{dv}" for d, dv in PAIRS]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
INFO = {b.name: b for b in flashattn.backends()}


def problem(head_dim, head_dim_v, dtype, seqlen_q=150, seqlen_k=97, seed=0):
    """q, k, v (2 batch elements, 4 query heads on 2 kv heads, ragged tiles) and dout."""
    q, k, v = random_bshd(2, seqlen_q, seqlen_k, 4, 2, head_dim, dtype=dtype, device="cuda",
                          seed=seed, head_dim_v=head_dim_v)
    dout = torch.randn((*q.shape[:3], head_dim_v),
                       generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, dout.to(device="cuda", dtype=dtype)


def taking(backward):
    """gpu_backends() pairs whose backend takes head_dim_v (None: the automatic choice)."""
    flag = "takes_backward_head_dim_v" if backward else "takes_head_dim_v"
    return [(name, dtype) for name, dtype in gpu_backends(backward)
            if name is None or getattr(INFO[name], flag)]


def refusing(backward):
    """The GPU backends (with a backward, for backward) that do not take head_dim_v."""
    flag = "takes_backward_head_dim_v" if backward else "takes_head_dim_v"
    return [b.name for b in flashattn.backends() if b.device == "cuda"
            and (b.has_backward or not backward) and not getattr(b, flag)]


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("backend,dtype", taking(False), ids=list(map(pair_id, taking(False))))
def test_forward(backend, dtype, pair, mask):
    skip_unless_runs(backend, max(pair))
    q, k, v, _ = problem(*pair, DTYPES[dtype], seed=sum(pair))
    out = unless_unsupported(lambda: flashattn.attention(q, k, v, backend=backend,
                                                         **MASKS[mask]))
    assert out.shape == (*q.shape[:3], pair[1]) and out.is_contiguous()
    assert_as_accurate_as_plain((out,), (q, k, v), **MASKS[mask])


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("backend,dtype", taking(True), ids=list(map(pair_id, taking(True))))
def test_backward(backend, dtype, pair, mask):
    skip_unless_runs(backend, max(pair), backward=True)
    q, k, v, dout = problem(*pair, DTYPES[dtype], seed=sum(pair))

    def grads():
        out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend,
                                       **MASKS[mask])
        return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                            **MASKS[mask])
    grads = unless_unsupported(grads)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert_as_accurate_as_plain(grads, (q, k, v, dout), **MASKS[mask])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_autograd_after_any_forward_backend(dtype):
    """Autograd after each forward that takes head_dim_v: the backward runs where it can
    (the forward's backend, else the automatic choice)."""
    q, k, v, dout = problem(64, 32, DTYPES[dtype], seed=3)
    for backend in [name for name, d in taking(False) if d == dtype]:
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        out = unless_unsupported(lambda: flashattn.attention(*leaves, causal=True,
                                                             backend=backend))
        out.backward(dout)
        assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout), causal=True)


@pytest.mark.parametrize("backend", refusing(False) or [None])
def test_backends_that_do_not_take_it_refuse_naming_vs_head_dim(backend):
    if backend is None:
        pytest.skip("every GPU backend takes head_dim_v")
    q, k, v, _ = problem(40, 24, DTYPES[INFO[backend].dtypes[0]], seed=4)
    with pytest.raises(flashattn.UnsupportedError,
                       match=rf"v: head_dim 24 differs from q's and k's \(40\), which "
                             rf"{backend} does not take"):
        flashattn.attention(q, k, v, backend=backend)


@pytest.mark.parametrize("backend", refusing(True) or [None])
def test_backwards_that_do_not_take_it_refuse_naming_vs_head_dim(backend):
    if backend is None:
        pytest.skip("every GPU backward takes head_dim_v")
    q, k, v, dout = problem(40, 24, DTYPES[INFO[backend].dtypes[0]], seed=5)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    with pytest.raises(flashattn.UnsupportedError,
                       match=rf"v: head_dim 24 differs from q's and k's \(40\), which "
                             rf"{backend}'s backward does not take"):
        flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_variable_length_batches(dtype):
    q, k, v, dout, cu_q, cu_k, options = varlen_case(CASES[2], head_dim=40, head_dim_v=24,
                                                     dtype=DTYPES[dtype], device="cuda")
    plain = per_sequence(plain_outputs, cu_q, cu_k, torch.cat)
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = flashattn.varlen_attention(q, k, v, cu_q, cu_k, **options)
    assert out.shape == (q.shape[0], 4, 24)
    assert_as_accurate_as_plain((out,), (q, k, v), plain=plain, **options)
    out.backward(dout)
    assert_as_accurate_as_plain((q.grad, k.grad, v.grad), (q, k, v, dout), plain=plain,
                                **options)


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_kv_caches(dtype, page_size):
    """The automatic choice over a cache whose v_cache and appended v have v's head_dim."""
    p = make_problem(seqlen_q=2, seqlen_new=1, head_dim=64, head_dim_v=32,
                     page_size=page_size, capacity=40, seed=6)
    dtype = DTYPES[dtype]
    rounded = {name: torch.from_numpy(getattr(p, name)).to(dtype)
               for name in ("q", "k_cache", "v_cache", "k_new", "v_new")}
    for name, t in rounded.items():
        setattr(p, name, t.float().numpy())
    expected, _ = reference(p, causal=True)
    t = {name: x.cuda() for name, x in rounded.items()}
    lengths = torch.from_numpy(p.cache_seqlens).cuda()
    table = None if p.block_table is None else torch.from_numpy(p.block_table).cuda()
    out = flashattn.attention_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["k_new"],
                                           t["v_new"], lengths, table, causal=True)
    assert out.shape == (*p.q.shape[:3], 32)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_l2(out.float().cpu().numpy(), expected) <= tolerance
