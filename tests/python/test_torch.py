"""flashattn on PyTorch CPU tensors: the custom op, sdpa, torch.compile, errors. Skipped
without torch; test_torch_backward.py covers autograd, test_torch_cuda.py the GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _torch_op  # noqa: E402
import edge_cases  # noqa: E402
from attention_reference import assert_lse_close, reference_attention, rel_l2  # noqa: E402
from edge_cases import EMPTY_IDS, EMPTY_SIZES  # noqa: E402
from torch_cases import random_bhsd, random_bshd, reference_bshd  # noqa: E402

# Relative L2 error of fp32 arithmetic on rounded inputs: the output's rounding dominates.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_attention_on_cpu_tensors(dtype, alignment):
    q, k, v = random_bshd(2, 19, 27, 4, 2, 32, dtype=dtype, seed=1)
    out, lse = flashattn.attention(q, k, v, causal=True, causal_alignment=alignment,
                                   return_lse=True)
    expected, expected_lse = reference_bshd(q, k, v, causal=True, causal_alignment=alignment)
    assert out.dtype == dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 19)
    assert rel_l2(out.float().numpy(), expected) <= TOLERANCE[dtype]
    assert_lse_close(lse.numpy(), expected_lse, tol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_sdpa_matches_torch(seed):
    rng = np.random.default_rng(seed)
    heads_kv = int(rng.integers(1, 4))
    heads_q = heads_kv * int(rng.choice([1, 2, 3]))
    query, key, value = random_bhsd(int(rng.integers(1, 3)), int(rng.integers(1, 64)),
                                    int(rng.integers(1, 64)), heads_q, heads_kv,
                                    int(rng.choice([8, 32, 64])), seed=seed)
    options = dict(is_causal=bool(rng.integers(2)), enable_gqa=heads_q != heads_kv)
    out = flashattn.sdpa(query, key, value, **options)
    assert out.shape == query.shape
    expected = F.scaled_dot_product_attention(query, key, value, **options)
    assert rel_l2(out.numpy(), expected.numpy()) <= 1e-5


def test_sdpa_scale():
    query, key, value = random_bhsd(1, 8, 8, 2, 2, 16, seed=2)
    out = flashattn.sdpa(query, key, value, scale=0.3)
    expected = F.scaled_dot_product_attention(query, key, value, scale=0.3)
    assert rel_l2(out.numpy(), expected.numpy()) <= 1e-5


def test_strided_views_are_read_in_place():
    # A packed (batch, seqlen, 3, heads, head_dim) projection, as a transformer makes it.
    packed = torch.randn(2, 33, 3, 4, 40)[..., :32]
    q, k, v = packed.unbind(2)
    for t in (q, k, v):
        assert not t.is_contiguous() and _torch_op.kernel_tensor(t)[0] is t
    out = flashattn.attention(q, k, v, causal=True)
    assert rel_l2(out.numpy(), reference_bshd(q, k, v, causal=True)[0]) <= 1e-5


def test_views_the_kernels_cannot_read_are_copied():
    q, k, v = (t[..., ::2] for t in random_bshd(1, 9, 9, 2, 2, 16, seed=3))
    assert _torch_op.kernel_tensor(q)[0] is not q
    out = flashattn.attention(q, k, v)
    assert rel_l2(out.numpy(), reference_bshd(q, k, v)[0]) <= 1e-5


def test_custom_op_passes_opcheck():
    q, k, v = random_bshd(1, 7, 9, 4, 2, 16, seed=4)
    for args in [(q, k, v, True, "bottom_right", None, None),
                 (q.transpose(1, 2).contiguous().transpose(1, 2), k, v, False, "top_left", 0.5,
                  "reference")]:
        torch.library.opcheck(torch.ops.flashattn.attention_fwd.default, args)


def test_torch_compile_fullgraph():
    query, key, value = random_bhsd(2, 16, 24, 4, 2, 32, seed=5)

    def block(x, y, z):
        return flashattn.sdpa(x * 2, y, z, is_causal=True, enable_gqa=True).sum(dim=1)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(query, key, value), block(query, key, value))


def test_eager_calls_skip_the_dispatcher_with_the_same_result():
    q, k, v = random_bshd(2, 9, 11, 4, 2, 16, seed=9)
    direct = flashattn.attention(q, k, v, causal=True)
    through_op, _ = torch.ops.flashattn.attention_fwd(q, k, v, True, "top_left", None, None)
    torch.testing.assert_close(direct, through_op, rtol=0, atol=0)
    assert _torch_op.direct_call_is_safe(q, k, v)
    assert not _torch_op.direct_call_is_safe(q.requires_grad_(), k, v)  # autograd: the op


def test_no_grad_inference():
    q, k, v = random_bshd(1, 4, 4, 1, 1, 8, seed=7)
    with torch.no_grad():
        assert not flashattn.attention(q.requires_grad_(), k, v).requires_grad


def bhsd():
    return random_bhsd(1, 5, 6, 4, 2, 8, seed=8)


def attention_bhsd(q, k, v, **options):
    """flashattn.attention on SDPA-layout tensors, through (batch, seqlen, heads, head_dim) views."""
    return flashattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **options)


SDPA_ERRORS = [
    ("attn_mask", lambda q, k, v: flashattn.sdpa(q, k, v, attn_mask=torch.ones(5, 7, dtype=bool),
                                                 enable_gqa=True),
     ValueError, r"attn_mask: has shape \(5, 7\), must broadcast to"),
    ("dropout", lambda q, k, v: flashattn.sdpa(q, k, v, dropout_p=1.5, enable_gqa=True),
     ValueError, r"variants.dropout.p: is 1.5, must be in \[0, 1\]"),
    ("gqa", lambda q, k, v: flashattn.sdpa(q, k, v), ValueError, "enable_gqa=True"),
    ("rank", lambda q, k, v: flashattn.sdpa(q[0], k[0], v[0], enable_gqa=True), ValueError,
     "query: has shape"),
    ("numpy", lambda q, k, v: flashattn.sdpa(q.numpy(), k, v), TypeError, "query: is a numpy"),
    ("dtype", lambda q, k, v: attention_bhsd(q.double(), k.double(), v.double()),
     ValueError, "q: dtype is torch.float64"),
    ("mixed", lambda q, k, v: flashattn.attention(q, k.numpy(), v), TypeError, "k: is a numpy"),
    ("library", lambda q, k, v: attention_bhsd(q, k[..., :4], v[..., :4]), ValueError,
     "k: head_dim is 4, must equal q's head_dim"),
    ("cuda_backend", lambda q, k, v: attention_bhsd(q, k, v, backend="cuda_tiled"),
     NotImplementedError, "backend: cuda_tiled runs on cuda tensors"),
    ("alignment", lambda q, k, v: attention_bhsd(q, k, v, causal_alignment="right"),
     ValueError, "causal_alignment: is 'right'"),
]


@pytest.mark.parametrize("call,error,words", [e[1:] for e in SDPA_ERRORS],
                         ids=[e[0] for e in SDPA_ERRORS])
def test_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call(*bhsd())


@pytest.mark.parametrize("batch,seqlen_q,seqlen_k", EMPTY_SIZES, ids=EMPTY_IDS)
def test_empty_problems(batch, seqlen_q, seqlen_k):
    """Tensors without elements (data_ptr() 0) are legal, eagerly, through the custom op and
    under torch.compile. seqlen_k 0 gives out 0 and lse -inf (rows without keys); torch's
    SDPA defines no value there (its CPU kernel gives 0, others NaN), so only ours is checked."""
    q, k, v = random_bshd(batch, seqlen_q, seqlen_k, 4, 2, 8, seed=12)
    assert any(t.data_ptr() == 0 for t in (q, k, v))
    for causal in (False, True):
        out, lse = flashattn.attention(q, k, v, causal=causal, return_lse=True)
        assert out.shape == q.shape and lse.shape == (batch, 4, seqlen_q)
        assert torch.all(out == 0) and torch.all(lse == -torch.inf)
        through_op = torch.ops.flashattn.attention_fwd(q, k, v, causal, "bottom_right", None,
                                                       "cpu")
        torch.testing.assert_close(through_op, (out, lse), rtol=0, atol=0)
        query, key, value = (t.transpose(1, 2) for t in (q, k, v))
        ours = flashattn.sdpa(query, key, value, is_causal=causal, enable_gqa=True)
        theirs = F.scaled_dot_product_attention(query, key, value, is_causal=causal,
                                                enable_gqa=True)
        assert ours.shape == theirs.shape and torch.all(ours == 0)
        if ours.numel() == 0 or seqlen_k > 0:
            torch.testing.assert_close(ours, theirs)
    if (batch, seqlen_q) != (0, 0):  # opcheck's own input copy fails on two 0 dimensions
        torch.library.opcheck(torch.ops.flashattn.attention_fwd.default,
                              (q, k, v, True, "top_left", None, None))

    def block(x, y, z):
        return flashattn.sdpa(x * 2, y, z, is_causal=True, enable_gqa=True) + 1
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    query, key, value = (t.transpose(1, 2) for t in (q, k, v))
    torch.testing.assert_close(compiled(query, key, value), block(query, key, value))


@pytest.mark.parametrize("backend", [None, "reference"])
@pytest.mark.parametrize("case", list(edge_cases.NON_FINITE))
def test_non_finite_values_on_cpu_tensors(case, backend):
    (q, k, v), options, nan = edge_cases.NON_FINITE[case]()
    out, lse = flashattn.attention(*(torch.from_numpy(a) for a in (q, k, v)), return_lse=True,
                                   backend=backend, **options)
    np.testing.assert_array_equal(torch.isnan(out).numpy(), nan)
    edge_cases.assert_matches(out.numpy(), lse.numpy(), *reference_attention(q, k, v, **options))
    edge_cases.assert_matches(out.numpy(), lse.numpy(),
                              *flashattn.attention(q, k, v, return_lse=True, backend="reference",
                                                   **options))
