"""The backward on PyTorch CUDA tensors: cuda_wgmma (on Hopper), cuda_mma and cuda_tiled (and the automatic choice)
against float64 autograd, deterministic mode, torch.compile training steps, streams.
Skipped without torch or a CUDA GPU."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from attention_reference import rel_l2  # noqa: E402
from edge_cases import EMPTY_IDS, EMPTY_SIZES  # noqa: E402
from torch_cases import plain_grads, random_bhsd, random_bshd  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HALF = [torch.float16, torch.bfloat16]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim): ragged tiles, GQA, Nq ≠ Nk.
SHAPES = [(2, 150, 97, 4, 2, 72), (1, 257, 513, 6, 2, 128), (1, 64, 200, 2, 1, 256),
          (3, 1, 17, 2, 2, 64)]
SHAPE_IDS = ["b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*s) for s in SHAPES]


def backward_limit(name):
    backend = {b.name: b for b in flashattn.backends()}[name]
    return backend.backward_max_head_dim or 1 << 30


def grads_of(q, k, v, dout, backend=None, deterministic=False, **options):
    """The forward, then attention_backward on its out and lse."""
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                        deterministic=deterministic, **options)


def assert_gradients_accurate(grads, inputs, dout, options):
    """fp32: within 1e-5 (relative L2) of float64 autograd on the plain formula. 16-bit: at
    most twice the error of the plain formula differentiated by torch in that dtype on the
    GPU, plus a quarter ulp."""
    dtype = inputs[0].dtype
    expected = plain_grads(*(x.double() for x in (*inputs, dout)), **options)
    plain = plain_grads(*inputs, dout, **options) if dtype != torch.float32 else None
    for i, (grad, x, want) in enumerate(zip(grads, inputs, expected)):
        assert grad.dtype == dtype and grad.shape == x.shape and grad.device == x.device
        err = rel_l2(grad.double().cpu().numpy(), want.cpu().numpy())
        if dtype == torch.float32:
            assert err <= 1e-5, "qkv"[i]
        else:
            floor = torch.finfo(dtype).eps / 4
            bound = 2 * rel_l2(plain[i].double().cpu().numpy(), want.cpu().numpy()) + floor
            assert err <= bound, "qkv"[i]


def problem(shape, dtype, seed=0):
    q, k, v = random_bshd(*shape, dtype=dtype, device="cuda", seed=seed)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, dout.to(device="cuda", dtype=dtype)


def skip_unless_runs(backend, head_dim):
    info = {b.name: b for b in flashattn.backends()}[backend]
    major, minor = torch.cuda.get_device_capability()
    if info.compute_capability and info.compute_capability != 10 * major + minor:
        pytest.skip(f"{backend} runs on GPUs of compute capability {info.compute_capability / 10} only")
    if head_dim > backward_limit(backend):
        pytest.skip(f"beyond {backend}'s backward head_dim limit")


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("backend", ["cuda_mma", "cuda_wgmma"])
def test_tensor_core_backward(backend, shape, dtype, mask):
    skip_unless_runs(backend, shape[-1])
    q, k, v, dout = problem(shape, dtype, seed=1)
    grads = grads_of(q, k, v, dout, backend=backend, **MASKS[mask])
    assert_gradients_accurate(grads, (q, k, v), dout, MASKS[mask])


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
@pytest.mark.parametrize("shape", SHAPES[:2] + [(2, 33, 17, 3, 1, 3), (1, 100, 100, 2, 2, 1)],
                         ids=SHAPE_IDS[:2] + ["d3", "d1"])
def test_cuda_tiled_backward(shape, dtype, mask):
    q, k, v, dout = problem(shape, dtype, seed=2)
    grads = grads_of(q, k, v, dout, backend="cuda_tiled", **MASKS[mask])
    assert_gradients_accurate(grads, (q, k, v), dout, MASKS[mask])


@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
@pytest.mark.parametrize("head_dim", [64, 320])
def test_automatic_backward_any_head_dim(dtype, head_dim):
    q, k, v, dout = problem((1, 70, 90, 4, 2, head_dim), dtype, seed=3)
    grads = grads_of(q, k, v, dout, causal=True)
    assert_gradients_accurate(grads, (q, k, v), dout, MASKS["top_left"])


@pytest.mark.parametrize("backend", ["cuda_wgmma", "cuda_mma", "cuda_tiled"])
def test_deterministic_backward_is_bit_identical(backend):
    skip_unless_runs(backend, 64)
    # Many key blocks and query heads per kv head: every dk, dv and dq sum crosses blocks.
    q, k, v, dout = problem((2, 1024, 1024, 8, 2, 64), torch.bfloat16, seed=4)
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    runs = [flashattn.attention_backward(q, k, v, out, dout, lse, causal=True, backend=backend,
                                         deterministic=True) for _ in range(3)]
    for again in runs[1:]:
        for a, b in zip(runs[0], again):
            assert torch.equal(a, b)


@pytest.mark.parametrize("mask", ["none", "bottom_right"])
@pytest.mark.parametrize("backend", ["cuda_wgmma", "cuda_mma"])
def test_deterministic_backward_in_head_groups(backend, mask):
    """Sixteen (batch, kv head) slices whose dq sums, Q and dO take 8 MB each, 128 MB in
    all: the deterministic grid runs them a few at a time, as many as fit in half of L2.
    Still bit-identical, and the default mode's gradients up to the order of dq's sums."""
    skip_unless_runs(backend, 128)
    q, k, v, dout = problem((4, 4096, 4096, 8, 4, 128), torch.bfloat16, seed=6)
    options = MASKS[mask]
    out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
    runs = [flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                         deterministic=det, **options)
            for det in (True, True, False)]
    for a, b, default in zip(*runs):
        assert torch.equal(a, b)
        assert rel_l2(a.double().cpu().numpy(), default.double().cpu().numpy()) < 4e-3


def test_autograd_and_sdpa_drop_in():
    query, key, value = (x.requires_grad_() for x in random_bhsd(
        2, 200, 333, 8, 2, 64, dtype=torch.bfloat16, device="cuda", seed=5))
    dout = torch.randn_like(query)
    flashattn.sdpa(query, key, value, is_causal=True, enable_gqa=True).backward(dout)
    ours = [x.grad for x in (query, key, value)]
    inputs = [x.detach().transpose(1, 2) for x in (query, key, value)]
    grads = [g.transpose(1, 2) for g in ours]
    assert_gradients_accurate(grads, inputs, dout.transpose(1, 2), MASKS["top_left"])
    wide = [x.detach().double().requires_grad_() for x in (query, key, value)]
    F.scaled_dot_product_attention(*wide, is_causal=True, enable_gqa=True).backward(
        dout.double())
    for g, w in zip(ours, wide):
        assert rel_l2(g.double().cpu().numpy(), w.grad.cpu().numpy()) < 2e-2


def test_strided_inputs_get_their_gradients():
    packed = torch.randn(2, 129, 3, 4, 80, device="cuda", dtype=torch.bfloat16)[..., :64]
    packed.requires_grad_()
    q, k, v = packed.unbind(2)
    dout = torch.randn_like(q)
    flashattn.attention(q, k, v, causal=True).backward(dout)
    contiguous = [x.detach().contiguous() for x in (q, k, v)]
    expected = grads_of(*contiguous, dout, causal=True)
    for i, want in enumerate(expected):
        assert torch.equal(packed.grad[:, :, i], want)


def test_torch_compile_training_step():
    """A small attention block trained for a few steps, compiled with fullgraph=True
    (inductor), against the same steps in eager mode."""
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(256, 3 * 256)
            self.proj = torch.nn.Linear(256, 256)

        def forward(self, x):
            q, k, v = self.qkv(x).unflatten(-1, (3, 4, 64)).permute(2, 0, 3, 1, 4)
            return self.proj(flashattn.sdpa(q, k, v, is_causal=True).transpose(1, 2).flatten(2))

    eager = Block().cuda()
    compiled_model = Block().cuda()
    compiled_model.load_state_dict(eager.state_dict())
    x = torch.randn(4, 128, 256, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(compiled_model, fullgraph=True)
    for model, run in ((eager, eager), (compiled_model, compiled)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(x).float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for a, b in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)


def test_backward_on_the_current_stream_without_host_sync():
    q, k, v, dout = problem((1, 512, 512, 8, 8, 64), torch.bfloat16, seed=6)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    # Deterministic, so that the two calls' gradients can be compared bit for bit
    # (by default dq's key tiles add in whatever order the atomics land).
    expected = flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True)
    dout_new = dout.clone()
    dout.zero_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)
        dout.copy_(dout_new)  # a kernel on another stream would read the zeros
        torch.cuda.set_sync_debug_mode("error")
        try:
            grads = flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert not stream.query()
    torch.cuda.current_stream().wait_stream(stream)
    for a, b in zip(grads, expected):
        assert torch.equal(a, b)


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_cuda_graph_capture_of_forward_and_backward(deterministic):
    """A training call, forward and backward, captured in one CUDA graph (torch's whole-network
    pattern: a warm-up on a side stream, gradients None before the capture) and replayed on
    new inputs: the gradients equal an eager call's on those inputs (bit for bit in
    deterministic mode)."""
    q, k, v = (t.transpose(1, 2).contiguous().requires_grad_()
               for t in problem((2, 300, 300, 4, 2, 64), torch.bfloat16, seed=8)[:3])
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    torch.use_deterministic_algorithms(deterministic)
    try:
        def step():
            flashattn.sdpa(q, k, v, is_causal=True, enable_gqa=True).backward(dout)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
                q.grad = k.grad = v.grad = None
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        with torch.no_grad():
            for t in (q, k, v, dout):
                t.copy_(torch.randn_like(t))
        graph.replay()
        replayed = [t.grad.clone() for t in (q, k, v)]
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        flashattn.sdpa(*leaves, is_causal=True, enable_gqa=True).backward(dout)
    finally:
        torch.use_deterministic_algorithms(False)
    for got, leaf in zip(replayed, leaves):
        if deterministic:
            assert torch.equal(got, leaf.grad)
        else:  # dq's key tiles add in whatever order the atomics land
            torch.testing.assert_close(got, leaf.grad)


@pytest.mark.parametrize("batch,seqlen_q,seqlen_k", EMPTY_SIZES, ids=EMPTY_IDS)
def test_empty_problems_on_gpu_backwards(batch, seqlen_q, seqlen_k):
    for backend in [b for b in flashattn.backends() if b.device == "cuda" and b.has_backward]:
        dtype = torch.float32 if "f32" in backend.dtypes else torch.float16
        q, k, v = random_bshd(batch, seqlen_q, seqlen_k, 4, 2, 64, dtype=dtype, device="cuda")
        grads = grads_of(q, k, v, torch.ones_like(q), backend=backend.name, causal=True)
        for grad, x in zip(grads, (q, k, v)):
            assert grad.shape == x.shape and not torch.any(grad), backend.name


def test_device_errors():
    q, k, v, dout = problem((1, 4, 4, 1, 1, 8), torch.float16, seed=7)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse: device is cpu"):
        flashattn.attention_backward(q, k, v, out, dout, lse.cpu())
    with pytest.raises(ValueError, match="dout: device differs"):
        flashattn.attention_backward(q, k, v, out, dout.cpu(), lse)
    with pytest.raises(NotImplementedError, match="cuda_naive has no backward"):
        flashattn.attention_backward(q, k, v, out, dout, lse, backend="cuda_naive")
