"""flashattn on PyTorch CUDA tensors against torch's SDPA and the float64 reference.
Skipped without torch or a CUDA GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _torch_op  # noqa: E402
from attention_reference import assert_lse_close, rel_l2  # noqa: E402
from edge_cases import EMPTY_IDS, EMPTY_SIZES  # noqa: E402
from torch_cases import (causal_mask, random_bhsd, random_bshd, reference_bhsd,  # noqa: E402
                         reference_bshd)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def torch_sdpa(query, key, value, causal, alignment):
    """torch's SDPA in the inputs' dtype; bottom-right through an explicit mask, whose rows
    that see no key (NaN in torch) are set to 0 as flashattn and the reference define them."""
    gqa = query.size(1) != key.size(1)
    if not causal or alignment == "top_left":
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal, enable_gqa=gqa)
    mask = causal_mask(query.size(2), key.size(2), alignment, query.device)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=gqa)
    return torch.nan_to_num(out, nan=0.0)


def assert_as_accurate_as_torch(ours, theirs, expected, dtype):
    """fp32: within 1e-5 (relative L2) of torch and of the reference. fp16/bf16: at most twice
    torch's own error in that dtype against the float64 reference, plus a quarter ulp."""
    ours, theirs = ours.float().cpu().numpy(), theirs.float().cpu().numpy()
    if dtype == torch.float32:
        assert rel_l2(ours, theirs) <= 1e-5
        assert rel_l2(ours, expected) <= 1e-5
    else:
        floor = torch.finfo(dtype).eps / 4
        assert rel_l2(ours, expected) <= 2 * rel_l2(theirs, expected) + floor


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", range(8))
def test_random_shapes_match_torch_sdpa(seed, dtype):
    rng = np.random.default_rng(seed)
    heads_kv = int(rng.choice([1, 2, 4]))
    heads_q = heads_kv * int(rng.choice([1, 2, 3]))
    causal = bool(rng.integers(2))
    alignment = str(rng.choice(["top_left", "bottom_right"]))
    query, key, value = random_bhsd(
        int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 300)),
        heads_q, heads_kv, int(rng.choice([16, 32, 64, 80, 96, 128, 256])), dtype=dtype,
        device="cuda", seed=seed)
    out = flashattn.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                              causal=causal, causal_alignment=alignment).transpose(1, 2)
    expected = reference_bhsd(query, key, value, causal=causal, causal_alignment=alignment)
    assert_as_accurate_as_torch(out, torch_sdpa(query, key, value, causal, alignment),
                                expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("heads_q,heads_kv", [(8, 8), (8, 2), (6, 1)])
def test_sdpa_is_a_drop_in(dtype, is_causal, heads_q, heads_kv):
    query, key, value = random_bhsd(2, 200, 333, heads_q, heads_kv, 64, dtype=dtype,
                                    device="cuda", seed=heads_q + heads_kv)
    gqa = heads_q != heads_kv
    out = flashattn.sdpa(query, key, value, is_causal=is_causal, enable_gqa=gqa)
    assert out.shape == query.shape and out.dtype == dtype and out.device == query.device
    theirs = F.scaled_dot_product_attention(query, key, value, is_causal=is_causal,
                                            enable_gqa=gqa)
    assert_as_accurate_as_torch(out, theirs, reference_bhsd(query, key, value, causal=is_causal),
                                dtype)


@pytest.mark.parametrize("backend", ["cuda_naive", "cuda_tiled", "cuda_tf32x3", "cuda_f16x3"])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_backends_and_lse(backend, alignment):
    q, k, v = random_bshd(2, 150, 97, 4, 2, 72, device="cuda", seed=1)
    out, lse = flashattn.attention(q, k, v, causal=True, causal_alignment=alignment,
                                   return_lse=True, backend=backend)
    expected, expected_lse = reference_bshd(q, k, v, causal=True, causal_alignment=alignment)
    assert rel_l2(out.cpu().numpy(), expected) <= 1e-5
    assert lse.device == q.device and lse.shape == (2, 4, 150)
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("backend", ["cuda_mma", "cuda_wgmma"])
def test_tensor_core_backend_and_lse(dtype, alignment, backend):
    needs = {b.name: b.compute_capability for b in flashattn.backends()}[backend]
    major, minor = torch.cuda.get_device_capability()
    if needs is not None and needs != major * 10 + minor:
        pytest.skip(f"{backend} runs on GPUs of compute capability {needs / 10} only")
    q, k, v = random_bshd(2, 150, 97, 4, 2, 72, dtype=dtype, device="cuda", seed=2)
    out, lse = flashattn.attention(q, k, v, causal=True, causal_alignment=alignment,
                                   return_lse=True, backend=backend)
    expected, expected_lse = reference_bshd(q, k, v, causal=True, causal_alignment=alignment)
    query, key, value = (t.transpose(1, 2) for t in (q, k, v))
    theirs = torch_sdpa(query, key, value, True, alignment).transpose(1, 2)
    assert_as_accurate_as_torch(out, theirs, expected, dtype)
    assert lse.shape == (2, 4, 150)
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_views(dtype):
    # q, k, v from one packed projection (batch, seqlen, 3, heads, head_dim), head_dim padded.
    packed = torch.randn(2, 257, 3, 8, 80, device="cuda").to(dtype)[..., :64]
    q, k, v = packed.unbind(2)
    for t in (q, k, v):
        assert not t.is_contiguous() and _torch_op.kernel_tensor(t)[0] is t  # read in place
    out = flashattn.attention(q, k, v, causal=True)
    assert out.is_contiguous()
    query, key, value = (t.transpose(1, 2) for t in (q, k, v))
    assert_as_accurate_as_torch(out.transpose(1, 2),
                                F.scaled_dot_product_attention(query, key, value, is_causal=True),
                                reference_bhsd(query, key, value, causal=True), dtype)


def test_torch_compile_fullgraph():
    query, key, value = random_bhsd(2, 128, 256, 8, 2, 64, dtype=torch.bfloat16, device="cuda",
                                    seed=2)
    weight = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) / 8

    def block(x, y, z):
        return flashattn.sdpa(x @ weight, y, z, is_causal=True, enable_gqa=True) @ weight
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(query, key, value), block(query, key, value))


def test_runs_on_the_current_stream_without_host_sync():
    q, k, v = random_bshd(1, 512, 512, 8, 8, 64, device="cuda", seed=3)
    q_new = torch.randn_like(q)
    # A kernel's first use in a process loads it (CUDA's lazy loading), which may wait
    # for the device: one call here, so that the call below is a warm one. (Without it,
    # the test failed once, in a pytest worker that had not run that kernel before.)
    flashattn.attention(q, k, v)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        # A kernel that runs on the default stream would read q before this copy lands.
        torch.cuda._sleep(200_000_000)
        q.copy_(q_new)
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = flashattn.attention(q, k, v)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        # Still sleeping: the call returned without waiting for the stream.
        assert not stream.query()
    torch.cuda.current_stream().wait_stream(stream)
    assert rel_l2(out.cpu().numpy(), reference_bshd(q_new, k, v)[0]) <= 1e-5


def test_cuda_graph_capture():
    q, k, v = random_bshd(2, 256, 256, 4, 4, 64, dtype=torch.bfloat16, device="cuda", seed=6)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashattn.attention(q, k, v, causal=True)
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.testing.assert_close(out, flashattn.attention(q, k, v, causal=True), rtol=0, atol=0)


def test_wide_rows_off_sectors_give_what_aligned_rows_give():
    # Head dim 264: rows of 528 bytes start off 32-byte sectors, so on Hopper the
    # forward first copies K and V into aligned rows (sm90/aligned_kv.h). The same
    # values in rows padded to 320 columns take no copy; the kernel is the same,
    # so the outputs are equal bit for bit, eagerly and replayed from a CUDA graph.
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("cuda_wgmma runs on compute capability 9.0 only")
    q, k, v = random_bshd(1, 2048, 300, 4, 1, 264, dtype=torch.bfloat16, device="cuda", seed=7)
    k_aligned, v_aligned = (torch.zeros(1, 300, 1, 320, device="cuda", dtype=torch.bfloat16)
                            [..., :264].copy_(t) for t in (k, v))
    expected = flashattn.attention(q, k_aligned, v_aligned, causal=True, backend="cuda_wgmma")
    out = flashattn.attention(q, k, v, causal=True, backend="cuda_wgmma")
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = flashattn.attention(q, k, v, causal=True, backend="cuda_wgmma")
    replayed.zero_()
    graph.replay()
    torch.testing.assert_close(replayed, expected, rtol=0, atol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_tensors_on_another_gpu():
    q, k, v = random_bshd(1, 64, 64, 2, 2, 32, device="cuda:1", seed=4)
    with torch.cuda.device(0):
        out = flashattn.attention(q, k, v, causal=True)
    assert out.device == q.device
    assert rel_l2(out.cpu().numpy(), reference_bshd(q, k, v, causal=True)[0]) <= 1e-5


def test_device_errors():
    q, k, v = random_bshd(1, 4, 4, 1, 1, 8, device="cuda", seed=5)
    with pytest.raises(ValueError, match="k: device differs from q's device"):
        flashattn.attention(q, k.cpu(), v)
    with pytest.raises(NotImplementedError, match="backend: cpu runs on cpu tensors"):
        flashattn.attention(q, k, v, backend="cpu")


@pytest.mark.parametrize("batch,seqlen_q,seqlen_k", EMPTY_SIZES, ids=EMPTY_IDS)
def test_empty_problems_on_every_gpu_backend(batch, seqlen_q, seqlen_k):
    major, minor = torch.cuda.get_device_capability()
    for backend in flashattn.backends():
        if backend.device != "cuda" or backend.compute_capability not in (None,
                                                                          major * 10 + minor):
            continue
        dtype = torch.float32 if "f32" in backend.dtypes else torch.float16
        q, k, v = random_bshd(batch, seqlen_q, seqlen_k, 4, 2, 64, dtype=dtype, device="cuda")
        out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True,
                                       backend=backend.name)
        assert out.shape == q.shape and lse.shape == (batch, 4, seqlen_q), backend.name
        assert torch.all(out == 0) and torch.all(lse == -torch.inf), backend.name
