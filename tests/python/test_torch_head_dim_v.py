"""v's head_dim differing from q's and k's (head_dim_v) on PyTorch CPU tensors: the forward
and autograd in f32, f16 and bf16 against the plain formula, the raw backward, sdpa against
torch's own SDPA (value's Ev ≠ E), the custom ops' fake implementations (shapes under
FakeTensorMode, opcheck, torch.compile with fullgraph=True), variable-length batches, KV
caches, ring attention (simulated), and which backend the autograd backward runs on.
Skipped without torch; test_head_dim_v.py covers NumPy, test_torch_cuda_head_dim_v.py the
GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _ring, _torch_op  # noqa: E402
from attention_reference import assert_lse_close, rel_l2  # noqa: E402
from kvcache_cases import expected_caches, make_problem, reference  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain,  # noqa: E402
                         assert_compiled_training_step, autograd_grads, plain_outputs,
                         random_bhsd, random_bshd, reference_bshd, varlen_case)
from varlen_cases import CASES, per_sequence  # noqa: E402

# (head_dim, head_dim_v): MLA prefill's, a v wider than q and k, odd sizes, the smallest.
PAIRS = [(192, 128), (64, 128), (40, 24), (1, 3)]
PAIR_IDS = [f"d{d}_dv{dv}" for d, dv in PAIRS]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def inputs(head_dim, head_dim_v, dtype=torch.float32, seqlen_q=11, seqlen_k=16, seed=0):
    """q, k, v (2 batch elements, 4 query heads on 2 kv heads) and dout, of out's shape."""
    q, k, v = random_bshd(2, seqlen_q, seqlen_k, 4, 2, head_dim, dtype=dtype, seed=seed,
                          head_dim_v=head_dim_v)
    dout = torch.randn((*q.shape[:3], head_dim_v),
                       generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, dout.to(dtype)


@pytest.mark.parametrize("backend", [None, "reference"], ids=["cpu", "reference"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_forward_and_autograd_match_the_plain_formula(pair, mask, dtype, backend):
    seqlen_q, seqlen_k = (11, 16) if sum(pair) % 2 else (16, 11)
    q, k, v, dout = inputs(*pair, dtype, seqlen_q, seqlen_k, seed=sum(pair))
    options = dict(MASKS[mask], backend=backend)
    out = flashattn.attention(q, k, v, **options)
    assert out.shape == (2, seqlen_q, 4, pair[1]) and out.is_contiguous()
    options.pop("backend")
    assert_as_accurate_as_plain((out,), (q, k, v), **options)
    grads = autograd_grads(q, k, v, dout, backend=backend, **options)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert_as_accurate_as_plain(grads, (q, k, v, dout), **options)


def test_lse_and_the_raw_backward_equal_autograd_and_the_numpy_path():
    q, k, v, dout = inputs(40, 24, seed=1)
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    assert_lse_close(lse.numpy(), reference_bshd(q, k, v, causal=True)[1], tol=1e-4)
    raw = flashattn.attention_backward(q, k, v, out, dout, lse, causal=True)
    for ours, theirs in zip(raw, autograd_grads(q, k, v, dout, causal=True)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    arrays = [x.numpy() for x in (q, k, v, out, dout, lse)]
    for ours, theirs in zip(raw, flashattn.attention_backward(*arrays, causal=True)):
        np.testing.assert_array_equal(ours.numpy(), theirs)


@pytest.mark.parametrize("pair", [(48, 16), (8, 40)], ids=["E48_Ev16", "E8_Ev40"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_matches_torch_sdpa_forward_and_backward(pair, is_causal):
    query, key, value = (t.requires_grad_() for t in random_bhsd(
        2, 13, 17, 4, 2, pair[0], seed=2, head_dim_v=pair[1]))
    out = flashattn.sdpa(query, key, value, is_causal=is_causal, enable_gqa=True)
    assert out.shape == (2, 4, 13, pair[1])
    wide = [t.detach().double().requires_grad_() for t in (query, key, value)]
    expected = F.scaled_dot_product_attention(*wide, is_causal=is_causal, enable_gqa=True)
    assert rel_l2(as_float64(out), as_float64(expected)) <= 1e-5
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    out.backward(dout)
    expected.backward(dout.double())
    for ours, theirs in zip((query, key, value), wide):
        assert ours.grad.shape == ours.shape
        assert rel_l2(as_float64(ours.grad), as_float64(theirs.grad)) <= 1e-5


def test_the_ops_fake_implementations_give_vs_head_dim():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k = torch.empty(2, 5, 4, 24), torch.empty(2, 7, 2, 24)
        v = torch.empty(2, 7, 2, 8)
        out, lse = torch.ops.flashattn.attention_fwd(q, k, v, True, "top_left", None, None)
        assert out.shape == (2, 5, 4, 8) and lse.shape == (2, 4, 5)
        grads = torch.ops.flashattn.attention_bwd(out, q, k, v, out, lse, True, "top_left",
                                                  None, None, False)
        assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]


def test_the_ops_pass_opcheck():
    q, k, v, dout = inputs(24, 8, seed=4)
    torch.library.opcheck(torch.ops.flashattn.attention_fwd.default,
                          (q, k, v, True, "bottom_right", None, None))
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    torch.library.opcheck(torch.ops.flashattn.attention_bwd.default,
                          (dout, q, k, v, out, lse, False, "top_left", 0.5, "reference", True))


def test_torch_compile_traces_a_training_step():
    """fullgraph=True through sdpa with value's Ev ≠ E: the compiled gradients equal eager's,
    through both custom ops."""
    weight = torch.randn(32, 32, requires_grad=True)

    def loss_of(x, key, value):
        query = (x @ weight).unflatten(-1, (4, 8)).transpose(1, 2)
        out = flashattn.sdpa(query, key, value, is_causal=True, enable_gqa=True)
        assert out.shape[-1] == value.shape[-1]
        return out.square().mean()
    key, value = (t.requires_grad_() for t in random_bhsd(2, 24, 24, 4, 2, 8, seed=5,
                                                          head_dim_v=12)[1:])
    assert_compiled_training_step(loss_of, torch.randn(2, 24, 32), weight, key, value)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_variable_length_batches(dtype):
    case = CASES[2]  # causal, bottom-right aligned
    q, k, v, dout, cu_q, cu_k, options = varlen_case(case, head_dim=40, head_dim_v=24,
                                                     dtype=dtype)
    out = flashattn.varlen_attention(q, k, v, cu_q, cu_k, **options)
    assert out.shape == (q.shape[0], 4, 24)
    plain = per_sequence(plain_outputs, cu_q, cu_k, torch.cat)
    assert_as_accurate_as_plain((out,), (q, k, v), plain=plain, **options)
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    flashattn.varlen_attention(q, k, v, cu_q, cu_k, **options).backward(dout)
    assert_as_accurate_as_plain((q.grad, k.grad, v.grad), (q, k, v, dout), plain=plain,
                                **options)


@pytest.mark.parametrize("page_size", [None, 3], ids=["contiguous", "paged3"])
def test_kv_caches_eagerly_and_compiled(page_size):
    """v_cache and v of v's head_dim; the op's fake implementation gives out that head_dim
    under torch.compile, and the compiled call writes the cache as the eager one."""
    p = make_problem(seqlen_q=2, seqlen_new=1, head_dim=40, head_dim_v=24,
                     page_size=page_size, seed=6)
    expected_out, expected_lse = reference(p, causal=True)
    expected_k, expected_v = expected_caches(p)

    def tensors():
        return [None if x is None else torch.from_numpy(x.copy())
                for x in (p.q, p.k_cache, p.v_cache, p.k_new, p.v_new, p.cache_seqlens,
                          p.block_table)]

    def step(q, k_cache, v_cache, k, v, cache_seqlens, block_table):
        return flashattn.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens,
                                                block_table, causal=True,
                                                return_softmax_lse=True)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for run in (step, compiled):
        args = tensors()
        out, lse = run(*args)
        assert out.shape == (*p.q.shape[:3], 24)
        assert rel_l2(out.numpy(), expected_out) <= 1e-5
        assert_lse_close(lse.numpy(), expected_lse, tol=1e-4)
        np.testing.assert_array_equal(args[1].numpy(), expected_k)
        np.testing.assert_array_equal(args[2].numpy(), expected_v)
    reading = tensors()
    torch.library.opcheck(torch.ops.flashattn.kvcache_fwd.default,
                          (*reading[:3], reading[5], reading[6], None, True, -1, -1, 0.0, None,
                           0, True, "reference"))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_simulated_ring_equals_the_whole_problem(world_size, causal):
    """The ring passes k and v of different head dims as one block, and their gradients'
    accumulator likewise."""
    seqlen = 2 * world_size * 3
    q, k, v = random_bshd(2, seqlen, seqlen, 4, 2, 24, seed=world_size, head_dim_v=8)
    dout = torch.randn((*q.shape[:3], 8), generator=torch.Generator().manual_seed(7))
    parts = [[flashattn.zigzag_shard(t, world_size, r) for r in range(world_size)]
             for t in (q, k, v, dout)]
    options = _ring.Options(causal=causal, scale=None, backend=None, deterministic=False)
    results = _ring.simulate(*parts[:3], options)
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    grads = _ring.simulate_backward(*parts[:3], outs, lses, parts[3], options)
    out = flashattn.zigzag_unshard(outs)
    grads = [flashattn.zigzag_unshard([g[i] for g in grads]) for i in range(3)]
    assert out.shape == dout.shape and [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert_as_accurate_as_plain((out,), (q, k, v), causal=causal)
    assert_as_accurate_as_plain(grads, (q, k, v, dout), causal=causal)


def test_the_autograd_backward_stays_on_a_backend_that_takes_it():
    """backward_backend keeps the forward's backend only where its backward takes v's
    head_dim (and the wider of the two within its limit); else the automatic choice."""
    for b in flashattn.backends():
        takes = b.has_backward and b.takes_backward_head_dim_v
        assert _torch_op.backward_backend(b.name, 64, 32) == (b.name if takes else None)
        assert _torch_op.backward_backend(b.name, 64, 64) == _torch_op.backward_backend(b.name,
                                                                                         64)
        if takes and b.backward_max_head_dim:
            limit = b.backward_max_head_dim
            assert _torch_op.backward_backend(b.name, 8, limit + 8) is None
            assert _torch_op.backward_backend(b.name, limit, 8) == b.name
