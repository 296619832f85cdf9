"""Dropout (dropout_p, dropout_seed, dropout_offset, generator): the forward and gradients of
every backend against float64 attention given flashattn.dropout_mask's keep mask, written
out here (kept probabilities scaled by 2**16 / (2**16 - round(p·2**16))); the mask's keep
rate; reproducibility from a seed and from torch.manual_seed; variable-length sequences as
dense batches at their offsets; argument errors. NumPy and torch CPU always; torch CUDA
where a GPU is visible."""
import math

import numpy as np
import pytest

import flashattn

torch = pytest.importorskip("torch")


def keep_scale(p):
    dropped = round(p * 65536)
    return 0.0 if dropped >= 65536 else 65536 / (65536 - dropped)


def reference(q, k, v, p, seed, offset=0, causal=False):
    """float64 out and the autograd leaves: softmax(q·kᵀ/√d)·Z·v, Z from the keep mask."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    keep = flashattn.dropout_mask(p, seed, batch, heads_q, seqlen_q, seqlen_k,
                                  dropout_offset=offset)
    z = torch.from_numpy(keep).double() * keep_scale(p)
    leaves = [torch.as_tensor(np.asarray(t.detach().cpu().float()) if isinstance(t, torch.Tensor)
                              else t).double().requires_grad_() for t in (q, k, v)]
    qd, kd, vd = (t.transpose(1, 2) for t in leaves)
    group = heads_q // heads_kv
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(head_dim)
    if causal:
        s = s.masked_fill(torch.ones(seqlen_q, seqlen_k, dtype=torch.bool).triu(1), -math.inf)
    out = ((torch.softmax(s, -1) * z) @ vd).transpose(1, 2)
    return out, leaves


def rel(a, b):
    """‖a − b‖ / ‖b‖; ‖a‖ where b is 0 (p = 1: everything dropped)."""
    a, b = torch.as_tensor(np.asarray(a)).double(), b.detach().double()
    norm = float(b.norm())
    return float((a - b).norm() / norm) if norm > 0 else float(a.norm())


def inputs(shape, dtype=torch.float32, device="cpu", seed=0):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    g = torch.Generator().manual_seed(seed)
    draw = lambda n, h: torch.randn(batch, n, h, head_dim, generator=g).to(device, dtype)
    return draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv)


SHAPES = [(2, 70, 90, 4, 2, 32), (1, 1, 300, 2, 1, 64), (1, 130, 50, 2, 2, 80),
          (1, 17, 17, 3, 3, 1)]
RATES = [0.1, 0.5, 1.0]


@pytest.mark.parametrize("p", RATES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_forward_and_backward_match_float64(shape, p):
    q, k, v = (t.numpy() for t in inputs(shape))
    out, lse = flashattn.attention(q, k, v, dropout_p=p, dropout_seed=12345, return_lse=True)
    expected, leaves = reference(q, k, v, p, 12345)
    assert rel(out, expected) <= 1e-5
    plain_out, plain_lse = flashattn.attention(q, k, v, return_lse=True)
    np.testing.assert_allclose(lse, plain_lse, rtol=1e-6, atol=1e-6)  # lse is undropped
    dout = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    grads = flashattn.attention_backward(q, k, v, out, dout, lse, dropout_p=p,
                                         dropout_seed=12345)
    expected_grads = torch.autograd.grad(expected, leaves, torch.from_numpy(dout).double())
    for got, want in zip(grads, expected_grads):
        assert rel(got, want) <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_torch_autograd_matches_float64(causal):
    q, k, v = (t.requires_grad_() for t in inputs((2, 65, 65, 4, 1, 16), seed=3))
    out = flashattn.attention(q, k, v, causal=causal, dropout_p=0.3, dropout_seed=2**64 - 1,
                              dropout_offset=7)
    expected, leaves = reference(q, k, v, 0.3, 2**64 - 1, 7, causal)
    assert rel(out.detach().numpy(), expected) <= 1e-5
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    for got, want in zip(grads, torch.autograd.grad(expected, leaves, dout.double())):
        assert rel(got.numpy(), want) <= 1e-5


def test_torch_compile_traces_dropout():
    q, k, v = (t.requires_grad_() for t in inputs((1, 40, 40, 2, 2, 16), seed=4))
    f = torch.compile(lambda a, b, c: flashattn.attention(a, b, c, dropout_p=0.2,
                                                          dropout_seed=99), fullgraph=True)
    out = f(q, k, v)
    eager = flashattn.attention(q, k, v, dropout_p=0.2, dropout_seed=99)
    assert torch.equal(out, eager)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_sdpa_draws_from_torch_generators():
    q, k, v = (t.transpose(1, 2) for t in inputs((2, 50, 50, 2, 2, 16), seed=5))
    torch.manual_seed(11)
    first = flashattn.sdpa(q, k, v, dropout_p=0.2)
    torch.manual_seed(11)
    again = flashattn.sdpa(q, k, v, dropout_p=0.2)
    later = flashattn.sdpa(q, k, v, dropout_p=0.2)
    assert torch.equal(first, again) and not torch.equal(first, later)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(flashattn.sdpa(q, k, v, dropout_p=0.2, generator=g1),
                       flashattn.sdpa(q, k, v, dropout_p=0.2, generator=g2))
    assert torch.equal(flashattn.sdpa(q, k, v, dropout_p=0.0), flashattn.sdpa(q, k, v))


def test_numpy_generator_and_seed_reproduce():
    q, k, v = (t.numpy() for t in inputs((1, 30, 30, 2, 2, 8), seed=6))
    a = flashattn.attention(q, k, v, dropout_p=0.4, generator=np.random.default_rng(3))
    b = flashattn.attention(q, k, v, dropout_p=0.4, generator=np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    keep = flashattn.dropout_mask(p, np.random.default_rng().integers(2**63), 2, 8, 256, 256)
    n = keep.size
    assert abs(keep.mean() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n)


def test_varlen_sequences_are_dense_batches_at_their_offsets():
    q, k, v = (t[0] for t in inputs((1, 50, 50, 2, 1, 16), seed=8))
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    out = flashattn.varlen_attention(q, k, v, cu, cu, dropout_p=0.3, dropout_seed=5,
                                     dropout_offset=4)
    for b, (lo, hi) in enumerate(((0, 20), (20, 50))):
        dense = flashattn.attention(q[None, lo:hi], k[None, lo:hi], v[None, lo:hi],
                                    dropout_p=0.3, dropout_seed=5, dropout_offset=4 + 2 * b)
        torch.testing.assert_close(out[lo:hi], dense[0], rtol=1e-6, atol=1e-6)


def test_bad_dropout_arguments_are_named():
    q, k, v = inputs((1, 4, 4, 1, 1, 8))
    with pytest.raises(flashattn.InvalidArgumentError, match=r"variants.dropout.p: is 1.5"):
        flashattn.attention(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="dropout_p"):
        flashattn.attention(q, k, v, dropout_p="0.1")
    with pytest.raises(ValueError, match=r"dropout_seed: is -1, must be in \[0, 2\*\*64\)"):
        flashattn.attention(q, k, v, dropout_p=0.1, dropout_seed=-1)
    with pytest.raises(TypeError, match="generator"):
        flashattn.attention(q, k, v, dropout_p=0.1, generator="seed")


CUDA_BACKENDS = [("cuda_naive", torch.float32), ("cuda_tiled", torch.float32),
                 ("cuda_tiled", torch.bfloat16), ("cuda_tf32x3", torch.float32),
                 ("cuda_f16x3", torch.float32), ("cuda_mma", torch.float16),
                 ("cuda_mma", torch.bfloat16), ("cuda_wgmma", torch.bfloat16)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend,dtype", CUDA_BACKENDS, ids=str)
def test_cuda_backends_match_float64(backend, dtype, causal):
    q, k, v = (t.requires_grad_() for t in inputs((2, 200, 260, 4, 2, 64), dtype, "cuda", 9))
    try:
        out = flashattn.attention(q, k, v, causal=causal, dropout_p=0.2, dropout_seed=31,
                                  backend=backend)
    except flashattn.UnsupportedError as e:
        pytest.skip(str(e))
    expected, leaves = reference(q, k, v, 0.2, 31, 0, causal)
    # fp32 exact; 16-bit within a few of its unit roundoffs (the tests/cpp harness holds
    # the 16-bit kernels to twice standard attention's error).
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert rel(out.detach().float().cpu().numpy(), expected) <= tol
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    expected_grads = torch.autograd.grad(expected, leaves, dout.double().cpu())
    for got, want in zip(grads, expected_grads):
        assert rel(got.float().cpu().numpy(), want) <= tol
