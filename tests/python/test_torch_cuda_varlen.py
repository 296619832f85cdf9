"""Variable-length (packed) batches on PyTorch CUDA tensors: every GPU backend's forward and
every backward against the float64 plain formula run on each sequence alone (16-bit: against
that formula in the dtype), autograd, deterministic gradients, torch.compile, the prefix
sums' device rule, and unchecked calls (checked=False: no host wait) that equal checked ones,
are captured in a CUDA graph and give NaN everywhere for broken prefix sums. Skipped without torch or a CUDA GPU; a backend the library says cannot
run a packed batch is skipped with the library's reason, which pytest -rs lists."""
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, reference_attention  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain, gpu_backends,  # noqa: E402
                         numpy_options, pair_id, plain_outputs, skip_unless_runs,
                         unless_unsupported, varlen_case)
from varlen_cases import (CASE_IDS, CASES, LONG_CASE_IDS, LONG_CASES,  # noqa: E402
                          per_sequence)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ALL_CASES, ALL_IDS = CASES + LONG_CASES, CASE_IDS + LONG_CASE_IDS
HEAD_DIMS = (64, 128)
PAIRS, BACKWARD_PAIRS = gpu_backends(), gpu_backends(backward=True)


def longest(cu):
    return int((cu[1:] - cu[:-1]).max())


def cuda_case(case, head_dim, dtype):
    return varlen_case(case, head_dim=head_dim, dtype=DTYPES[dtype], device="cuda")


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_forward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim)
    q, k, v, _, cu_q, cu_k, options = cuda_case(case, head_dim, dtype)
    out, lse = unless_unsupported(lambda: flashattn.varlen_attention(
        q, k, v, cu_q, cu_k, return_lse=True, backend=backend, **options))
    assert_as_accurate_as_plain((out,), (q, k, v),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    _, expected_lse = per_sequence(reference_attention, cu_q, cu_k)(
        *(as_float64(x) for x in (q, k, v)), **numpy_options(options))
    assert lse.device == q.device
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4 if dtype == "f32" else 1e-3)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", BACKWARD_PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_backward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim, backward=True)
    q, k, v, dout, cu_q, cu_k, options = cuda_case(case, head_dim, dtype)

    def grads():
        out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True,
                                              backend=backend, **options)
        return flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                   backend=backend, **options)
    assert_as_accurate_as_plain(unless_unsupported(grads), (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("case", [LONG_CASES[-1], LONG_CASES[3]],
                         ids=[LONG_CASE_IDS[-1], LONG_CASE_IDS[3]])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_autograd_and_deterministic_gradients(dtype, case, head_dim):
    """Deterministic mode bit-identical; at head dim 128 cuda_wgmma's order of dq's adds
    from the first key tile up (under a window, walks of different lengths)."""
    q, k, v, dout, cu_q, cu_k, options = cuda_case(case, head_dim, dtype)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    flashattn.varlen_attention(*leaves, cu_q, cu_k, **options).backward(dout)
    assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **options)
    first, again = (flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                        deterministic=True, **options)
                    for _ in range(2))
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert_as_accurate_as_plain(first, (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "unchecked"])
def test_torch_compile_fullgraph(checked):
    q, k, v, _, cu_q, cu_k, _ = cuda_case(LONG_CASES[1], 64, "bf16")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    sequences = {} if checked else dict(checked=False, max_seqlen_q=longest(cu_q),
                                        max_seqlen_k=longest(cu_k))

    def loss_of(x, y, z):
        out = flashattn.varlen_attention(x, y, z, cu_q, cu_k, causal=True, window_size=(64, 0),
                                         **sequences)
        return out.float().square().mean()
    torch._dynamo.reset()
    compiled = torch.compile(loss_of, fullgraph=True)
    compiled(q, k, v).backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    loss_of(q, k, v).backward()
    for ours, eager in zip(got, (q, k, v)):
        torch.testing.assert_close(ours, eager.grad)


def test_prefix_sums_on_another_device_are_refused():
    q, k, v, _, cu_q, cu_k, _ = cuda_case(CASES[0], 32, "f32")
    with pytest.raises(ValueError, match=r"cu_seqlens_q: device is cpu, must be q's device"):
        flashattn.varlen_attention(q, k, v, cu_q.cpu(), cu_k)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_unchecked_equals_checked(dtype):
    """checked=False with maxima above the longest sequences (wider grids), forward and
    autograd backward, against the checked call: within rounding, as the wider grid may
    run another tile configuration, and the backward's dQ sums are added in any order."""
    q, k, v, dout, cu_q, cu_k, options = cuda_case(LONG_CASES[-1], 64, dtype)
    maxima = dict(max_seqlen_q=longest(cu_q) + 37, max_seqlen_k=longest(cu_k) + 5)
    results = []
    for checked in (True, False):
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        out = flashattn.varlen_attention(*leaves, cu_q, cu_k, **maxima, checked=checked,
                                         **options)
        out.backward(dout)
        results.append([out.detach()] + [x.grad for x in leaves])
    for want, got in zip(*results):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_unchecked_broken_prefix_sums_give_nan(pair):
    backend, dtype = pair
    skip_unless_runs(backend, 64)
    q, k, v, dout, cu_q, cu_k, options = cuda_case(CASES[0], 64, dtype)
    out, lse = unless_unsupported(lambda: flashattn.varlen_attention(
        q, k, v, cu_q, cu_k, return_lse=True, backend=backend, **options))
    maxima = dict(max_seqlen_q=longest(cu_q), max_seqlen_k=longest(cu_k))
    broken = cu_k.clone()
    broken[1] = broken[-1] + 1  # past the total, and the next entry below it
    bad_out, bad_lse = flashattn.varlen_attention(q, k, v, cu_q, broken, return_lse=True,
                                                  backend=backend, checked=False, **maxima,
                                                  **options)
    # The backward on the automatic choice: not every forward's backend has a packed one.
    grads = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, broken,
                                                checked=False, **maxima, **options)
    for t in (bad_out, bad_lse, *grads):
        assert torch.isnan(t).all()
    short = dict(maxima, max_seqlen_q=maxima["max_seqlen_q"] - 1)
    assert torch.isnan(flashattn.varlen_attention(q, k, v, cu_q, cu_k, backend=backend,
                                                  checked=False, **short, **options)).all()


def test_unchecked_needs_max_seqlen():
    q, k, v, _, cu_q, cu_k, _ = cuda_case(CASES[0], 32, "f16")
    with pytest.raises(ValueError, match=r"max_seqlen_k: is None; checked=False needs it"):
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=100, checked=False)
    with pytest.raises(TypeError, match=r"checked: is a int, must be a bool"):
        flashattn.varlen_attention(q, k, v, cu_q, cu_k, checked=0)


def test_unchecked_cuda_graph_replay_equals_eager():
    """An unchecked packed call captured once and replayed as the inputs and the sequence
    boundaries change in place, against eager calls."""
    q, k, v, _, cu_q, cu_k, options = cuda_case(LONG_CASES[-1], 128, "bf16")
    maxima = dict(max_seqlen_q=q.shape[0], max_seqlen_k=k.shape[0])

    def call(*args):
        return flashattn.varlen_attention(*args, checked=False, return_lse=True, **maxima,
                                          **options)
    static = [t.clone() for t in (q, k, v, cu_q, cu_k)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as CUDA graphs want
        call(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = call(*static)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for step in range(3):
        for t in static[:3]:
            t.copy_(torch.randn(t.shape, generator=generator, device="cuda"))
        # Move one boundary inside the batch: the graph reads the prefix sums afresh.
        for cu in static[3:]:
            cu[1] = max(int(cu[1]) - step, 0)
        graph.replay()
        want_out, want_lse = call(*static)
        torch.testing.assert_close(static_out, want_out, rtol=0, atol=0)
        torch.testing.assert_close(static_lse, want_lse, rtol=0, atol=0)
