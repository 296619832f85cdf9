"""attn_mask on PyTorch CUDA tensors: every GPU backend's forward and every backward against
the float64 formula (16-bit: against the formula in that dtype), each float bias dtype with
each q dtype, autograd, deterministic gradients, torch.compile, flashattn.sdpa against
torch's SDPA, and the mask's device rule. Skipped without torch or a CUDA GPU; a backend the
library says cannot run a case is skipped with the library's reason (pytest -rs lists it)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, rel_l2  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain, gpu_backends,  # noqa: E402
                         mask_case, numpy_options, pair_id, random_bhsd, random_bshd,
                         reference_bshd, skip_unless_runs, unless_unsupported)
from variant_cases import (LONG_MASK_CASE_IDS, LONG_MASK_CASES, MASK_CASE_IDS,  # noqa: E402
                           MASK_CASES)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ALL_CASES, ALL_IDS = MASK_CASES + LONG_MASK_CASES, MASK_CASE_IDS + LONG_MASK_CASE_IDS
HEAD_DIMS = (64, 128)
PAIRS, BACKWARD_PAIRS = gpu_backends(), gpu_backends(backward=True)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_forward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim)
    q, k, v, _, options = mask_case(case, head_dim=head_dim, dtype=DTYPES[dtype],
                                    device="cuda")
    out, lse = unless_unsupported(lambda: flashattn.attention(
        q, k, v, return_lse=True, backend=backend, **options))
    assert_as_accurate_as_plain((out,), (q, k, v), **options)
    _, expected_lse = reference_bshd(q, k, v, **numpy_options(options))
    assert lse.device == q.device
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4 if dtype == "f32" else 1e-3)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", BACKWARD_PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_backward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim, backward=True)
    q, k, v, dout, options = mask_case(case, head_dim=head_dim, dtype=DTYPES[dtype],
                                       device="cuda")

    def grads():
        out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
        return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                            **options)
    assert_as_accurate_as_plain(unless_unsupported(grads), (q, k, v, dout), **options)


@pytest.mark.parametrize("bias_dtype", list(DTYPES.values()), ids=str)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=str)
def test_each_bias_dtype_with_each_q_dtype(dtype, bias_dtype):
    q, k, v, dout, options = mask_case(LONG_MASK_CASES[1], head_dim=64, dtype=dtype,
                                       device="cuda", bias_dtype=bias_dtype)
    assert options["attn_mask"].dtype == bias_dtype
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    out = flashattn.attention(*leaves, **options)
    out.backward(dout)
    assert_as_accurate_as_plain((out.detach(),), (q, k, v), **options)
    assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout), **options)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=str)
def test_autograd_and_deterministic_gradients(dtype):
    q, k, v, dout, options = mask_case(LONG_MASK_CASES[-1], head_dim=64, dtype=dtype,
                                       device="cuda")
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    flashattn.attention(*leaves, **options).backward(dout)
    assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout), **options)
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    first, again = (flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True,
                                                 **options) for _ in range(2))
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_torch_compile_fullgraph_with_a_mask():
    q, k, v = (t.requires_grad_() for t in random_bshd(2, 256, 256, 8, 2, 64,
                                                       dtype=torch.bfloat16, device="cuda",
                                                       seed=2))
    bias = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)

    def loss_of(x, y, z):
        padding = (torch.arange(256, device="cuda") < 200).expand(2, 1, 256, 256)
        out = flashattn.attention(x, y, z, causal=True, attn_mask=bias)
        out = out + flashattn.attention(x, y, z, attn_mask=padding)
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


@pytest.mark.parametrize("kind", ["bool", "bias"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sdpa_matches_torch(dtype, kind):
    """A key padding mask (batch, 1, 1, seqlen_k) and a shared bias (seqlen_q, seqlen_k),
    each read in place: as close to float64 as torch's own SDPA in the dtype (every row
    keeps keys, so torch's rows are defined)."""
    query, key, value = random_bhsd(2, 300, 517, 8, 8, 128, dtype=dtype, device="cuda", seed=3)
    if kind == "bool":
        mask = (torch.arange(517, device="cuda") < torch.tensor([[400], [517]],
                                                                device="cuda"))[:, None, None]
    else:
        mask = torch.randn(300, 517, device="cuda", dtype=dtype)
    ours = flashattn.sdpa(query, key, value, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    exact = F.scaled_dot_product_attention(*(t.double() for t in (query, key, value)),
                                           attn_mask=mask if kind == "bool" else mask.double())
    floor = torch.finfo(dtype).eps / 4
    assert rel_l2(as_float64(ours), as_float64(exact)) <= \
        2 * rel_l2(as_float64(theirs), as_float64(exact)) + floor


def test_sdpa_fully_masked_rows_are_zero():
    query, key, value = random_bhsd(1, 64, 80, 4, 4, 64, dtype=torch.bfloat16, device="cuda",
                                    seed=4)
    mask = torch.ones(64, 80, dtype=torch.bool, device="cuda")
    mask[5] = False
    mask[63] = False
    out = flashattn.sdpa(query, key, value, attn_mask=mask)
    assert not out[:, :, [5, 63]].any() and torch.isfinite(out).all()


def test_a_mask_on_another_device_is_refused():
    q, k, v = random_bshd(1, 8, 8, 4, 2, 32, device="cuda", seed=5)
    with pytest.raises(ValueError, match=r"attn_mask: device is cpu, must be q's device"):
        flashattn.attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool))
